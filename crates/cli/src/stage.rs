//! `gust stage in|out SRC... DEST`: the command line of gust-stage (which see): the
//! daemons copy the chunks they hold between the shared file system and GustFS.

use crate::instance::InstanceArgs;
use clap::{Args, ValueEnum};
use gust_stage::{Direction, Options, Via};
use std::path::PathBuf;

#[derive(Clone, Copy, ValueEnum)]
enum Way {
    /// Shared (local or parallel) file system -> GustFS.
    In,
    /// GustFS -> shared file system.
    Out,
}

#[derive(Clone, Copy, ValueEnum)]
enum ViaArg {
    /// The daemons (faster here for every size, down to one small file).
    Auto,
    /// Each daemon copies the chunks it holds: grows with the node count.
    Daemons,
    /// This process copies everything through the client: for a path only this
    /// node sees (not mounted where the daemons run).
    Client,
}

#[derive(Args)]
pub struct StageArgs {
    #[arg(value_enum)]
    direction: Way,
    /// Sources, then the destination. With one source the destination becomes its
    /// copy (rerunning finishes an interrupted stage); with several, each is copied
    /// into the destination directory under its own name.
    #[arg(required = true, num_args = 2..)]
    paths: Vec<String>,
    /// Requests in flight per daemon (or copy threads through the client).
    #[arg(short = 'j', long, default_value_t = 2)]
    jobs: usize,
    /// Who copies the data.
    #[arg(long, value_enum, default_value = "auto")]
    via: ViaArg,
    /// Read source and destination again and compare checksums; a file that
    /// differs is reported, undone and copied again by a rerun.
    #[arg(long)]
    verify: bool,
    /// Stage only files and symlinks matching GLOB (a name, or a path relative to
    /// the source if it has a `/`; repeatable).
    #[arg(long, value_name = "GLOB")]
    include: Vec<String>,
    /// Skip files, symlinks and directories matching GLOB (repeatable).
    #[arg(long, value_name = "GLOB")]
    exclude: Vec<String>,
    /// From an object store: do not give files their objects' user metadata as
    /// `user.s3.meta.*` extended attributes (saves one HEAD request per object).
    #[arg(long)]
    no_metadata: bool,
    /// Print the summary as JSON on stdout (failures included).
    #[arg(long)]
    json: bool,
    /// Stage in only the files a previous run read (`gust stop --record-reads`).
    #[arg(long, value_name = "FILE")]
    from_record: Option<PathBuf>,
    /// Stage out: keep copying files closed after writing while the job runs,
    /// until SIGINT or SIGTERM, then copy what is left and stop.
    #[arg(long)]
    follow: bool,
    /// With --follow: bound on the copy bandwidth while following, bytes per second
    /// (e.g. 200M, 1G; the final pass runs unthrottled).
    #[arg(long, value_name = "BYTES_PER_S", value_parser = crate::parse_size)]
    max_bandwidth: Option<u64>,
    /// With --follow: on SIGUSR1 make a full pass and then write its summary, with
    /// a generation number, to FILE (`gust flush` of cache mode).
    #[arg(long, value_name = "FILE", hide = true)]
    flush_file: Option<PathBuf>,
    #[command(flatten)]
    inst: InstanceArgs,
}

pub fn run(a: StageArgs) -> Result<(), String> {
    let c = a.inst.client()?;
    let mut paths = a.paths;
    let dest = paths.pop().expect("clap requires two paths");
    let direction = match a.direction {
        Way::In => Direction::In,
        Way::Out => Direction::Out,
    };
    let mut o = Options::new(direction, paths, dest);
    o.jobs = a.jobs.max(1);
    o.verify = a.verify;
    o.metadata = !a.no_metadata;
    o.include = a.include;
    o.exclude = a.exclude;
    o.via = match a.via {
        ViaArg::Auto => Via::Auto,
        ViaArg::Daemons => Via::Daemons,
        ViaArg::Client => Via::Client,
    };
    if let Some(f) = &a.from_record {
        if direction != Direction::In {
            return Err("--from-record is for `gust stage in`".into());
        }
        o.only = Some(gust_stage::reads::load(f)?);
    }
    let summary = if a.follow {
        if direction != Direction::Out {
            return Err("--follow is for `gust stage out`".into());
        }
        gust_stage::follow::run(&c, &o, a.max_bandwidth, a.flush_file.as_deref())?
    } else {
        if a.max_bandwidth.is_some() {
            return Err("--max-bandwidth goes with --follow".into());
        }
        gust_stage::run(&c, &o)?
    };
    eprintln!("gust stage: {}", summary.line());
    for f in &summary.failures {
        eprintln!("gust stage: FAILED {}: {}", f.path, f.reason);
    }
    if a.json {
        println!("{}", summary.json());
    }
    if summary.failures.is_empty() {
        Ok(())
    } else {
        Err(format!("{} file(s) not staged (listed above)", summary.failures.len()))
    }
}
