//! How daemons get started on nodes, and stopped: SLURM's hostlist syntax, the node
//! agent that runs on every node, the `ssh` and `srun` launchers, and `gust stop`.
//!
//! A multi-node start needs no shared file system. The launcher (`gust start`) makes
//! the instance's secret and runs one node agent (`gust node-agent`) per node, all at
//! once: through one `srun` step inside a SLURM allocation, or one `ssh` per host.
//! It talks to every agent over the agent's standard input and output with a line
//! protocol ([`agent`]): the secret goes down stdin (never argv, which every user of
//! the node can read in /proc); each agent starts its daemon and answers `ready` with
//! the daemon's hosts-file line; the launcher assembles the hosts file and sends it
//! back down every stdin; each agent writes it (and the secret) into the node-local
//! instance directory, which has the same path on every node, so that
//! `GUST_HOSTS_FILE` is one value for the whole job. Then the launcher pings every
//! daemon. Any failure before that point stops everything that was started.
//!
//! Not for: the hosts file's format (gust-hosts), the daemon itself (gust-daemon),
//! placement, command-line parsing (gust-cli).

pub mod agent;
pub mod hostlist;
pub mod launcher;
pub mod local;
pub mod netaddr;
pub mod proc;
pub mod stop;
