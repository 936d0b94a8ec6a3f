//! Where the endpoint, region and credentials come from: the places the AWS CLI and
//! SDKs read, in their order, so a user's existing setup works unchanged.
//!
//! * Profile: `AWS_PROFILE`, else `default`.
//! * Credentials: `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (and
//!   `AWS_SESSION_TOKEN`); else the profile's section of the shared credentials file
//!   (`AWS_SHARED_CREDENTIALS_FILE`, default `~/.aws/credentials`); else the
//!   profile's section of the config file (`AWS_CONFIG_FILE`, default
//!   `~/.aws/config`, where a profile other than `default` is `[profile NAME]`).
//! * Region: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`, else
//!   `us-east-1`.
//! * Endpoint: `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, the profile's
//!   `services`-free `s3 = endpoint_url = …` or `endpoint_url`, else AWS's own
//!   (`https://s3.REGION.amazonaws.com`, virtual-host addressing). Any other
//!   endpoint is addressed path style (`http://host:port/bucket/key`), which every
//!   S3-compatible store serves.
//!
//! Credentials never appear in argv, and [`Config`]'s `Debug` hides the secret.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The endpoint, region and credentials of one profile.
#[derive(Clone)]
pub struct Config {
    pub endpoint: String,
    /// AWS's own endpoint (virtual-host addressing) rather than a user-given one.
    pub aws_endpoint: bool,
    pub region: String,
    pub access_key: String,
    pub secret_key: String,
    pub session_token: Option<String>,
    /// The profile the values came from (for messages).
    pub profile: String,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .field("profile", &self.profile)
            .finish_non_exhaustive()
    }
}

/// The environment the values are read from: the process's own, or a map (tests).
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl Env for HashMap<&str, &str> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).filter(|v| !v.is_empty()).map(|v| v.to_string())
    }
}

impl Config {
    /// The configuration of the process environment and the user's files.
    pub fn from_env() -> Result<Config, String> {
        Config::load(&ProcessEnv)
    }

    pub fn load(env: &dyn Env) -> Result<Config, String> {
        let profile = env.var("AWS_PROFILE").unwrap_or_else(|| "default".into());
        let home = env.var("HOME").map(PathBuf::from);
        let file = |var: &str, name: &str| {
            env.var(var).map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(".aws").join(name)))
        };
        let config = match file("AWS_CONFIG_FILE", "config") {
            Some(p) => read_ini(&p)?,
            None => Ini::new(),
        };
        let credentials = match file("AWS_SHARED_CREDENTIALS_FILE", "credentials") {
            Some(p) => read_ini(&p)?,
            None => Ini::new(),
        };
        let config_section = if profile == "default" { "default".to_string() } else { format!("profile {profile}") };
        let from_config = |key: &str| config.get(&config_section).and_then(|s| s.get(key)).cloned();
        let from_credentials = |key: &str| credentials.get(&profile).and_then(|s| s.get(key)).cloned();
        let (access_key, secret_key, session_token) = match (
            env.var("AWS_ACCESS_KEY_ID"),
            env.var("AWS_SECRET_ACCESS_KEY"),
        ) {
            (Some(k), Some(s)) => (k, s, env.var("AWS_SESSION_TOKEN")),
            (Some(_), None) | (None, Some(_)) => {
                return Err("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go together: one of them is not set".into())
            }
            (None, None) => {
                let pick = |key: &str| from_credentials(key).or_else(|| from_config(key));
                match (pick("aws_access_key_id"), pick("aws_secret_access_key")) {
                        (Some(k), Some(s)) => (k, s, pick("aws_session_token")),
                        _ => {
                            return Err(format!(
                                "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give \
                                 aws_access_key_id and aws_secret_access_key for profile {profile} in ~/.aws/credentials"
                            ))
                        }
                    }
            }
        };
        let region = env
            .var("AWS_REGION")
            .or_else(|| env.var("AWS_DEFAULT_REGION"))
            .or_else(|| from_config("region"))
            .unwrap_or_else(|| "us-east-1".into());
        let given = env
            .var("AWS_ENDPOINT_URL_S3")
            .or_else(|| env.var("AWS_ENDPOINT_URL"))
            .or_else(|| from_config("s3.endpoint_url"))
            .or_else(|| from_config("endpoint_url"));
        let aws_endpoint = given.is_none();
        let endpoint = given.unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"));
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(format!("{endpoint}: an S3 endpoint is an http:// or https:// URL"));
        }
        Ok(Config { endpoint, aws_endpoint, region, access_key, secret_key, session_token, profile })
    }
}

/// Sections of an INI file, each a map of keys; a key of a nested block (`s3 =`
/// followed by indented lines) is `s3.key`.
type Ini = HashMap<String, HashMap<String, String>>;

fn read_ini(p: &Path) -> Result<Ini, String> {
    match std::fs::read_to_string(p) {
        Ok(text) => Ok(parse_ini(&text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Ini::new()),
        Err(e) => Err(format!("{}: {e}", p.display())),
    }
}

fn parse_ini(text: &str) -> Ini {
    let mut ini = Ini::new();
    let mut section: Option<String> = None;
    let mut nested: Option<String> = None;
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.split_whitespace().collect::<Vec<_>>().join(" "));
            nested = None;
            continue;
        }
        let (Some(s), Some((k, v))) = (&section, line.split_once('=')) else { continue };
        let (k, v) = (k.trim().to_string(), v.trim().to_string());
        let indented = raw.starts_with([' ', '\t']);
        let key = match &nested {
            Some(n) if indented => format!("{n}.{k}"),
            _ => {
                nested = if v.is_empty() { Some(k.clone()) } else { None };
                k
            }
        };
        ini.entry(s.clone()).or_default().insert(key, v);
    }
    ini
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_with(dir: &Path, extra: &[(&'static str, &'static str)]) -> HashMap<&'static str, &'static str> {
        let home: &'static str = Box::leak(dir.display().to_string().into_boxed_str());
        let mut m: HashMap<&str, &str> = extra.iter().copied().collect();
        m.insert("HOME", home);
        m
    }

    #[test]
    fn environment_comes_before_files_and_files_before_defaults() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(".aws")).unwrap();
        std::fs::write(
            d.path().join(".aws/credentials"),
            "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = filesecret\n\n[other]\naws_access_key_id=OK2\naws_secret_access_key=os2\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join(".aws/config"),
            "# comment\n[default]\nregion = eu-west-3\n\n[profile other]\nregion = ap-south-1\ns3 =\n  endpoint_url = http://127.0.0.1:9000\nendpoint_url = http://ignored:1\n",
        )
        .unwrap();
        let c = Config::load(&env_with(d.path(), &[])).unwrap();
        assert_eq!(
            (c.access_key.as_str(), c.secret_key.as_str(), c.region.as_str()),
            ("FILEKEY", "filesecret", "eu-west-3")
        );
        assert_eq!(c.endpoint, "https://s3.eu-west-3.amazonaws.com");
        assert!(c.aws_endpoint);
        let c = Config::load(&env_with(d.path(), &[("AWS_PROFILE", "other")])).unwrap();
        assert_eq!((c.access_key.as_str(), c.region.as_str()), ("OK2", "ap-south-1"));
        assert_eq!(c.endpoint, "http://127.0.0.1:9000", "the s3 service block comes before the general endpoint");
        assert!(!c.aws_endpoint);
        let c = Config::load(&env_with(
            d.path(),
            &[
                ("AWS_ACCESS_KEY_ID", "ENVKEY"),
                ("AWS_SECRET_ACCESS_KEY", "envsecret"),
                ("AWS_REGION", "us-west-2"),
                ("AWS_ENDPOINT_URL", "http://[::1]:8333"),
            ],
        ))
        .unwrap();
        assert_eq!(
            (c.access_key.as_str(), c.region.as_str(), c.endpoint.as_str()),
            ("ENVKEY", "us-west-2", "http://[::1]:8333")
        );
        assert!(!format!("{c:?}").contains("envsecret"), "Debug hides the secret");
    }

    #[test]
    fn missing_or_half_credentials_are_clear_errors() {
        let d = tempfile::tempdir().unwrap();
        let e = Config::load(&env_with(d.path(), &[])).unwrap_err();
        assert!(e.contains("no S3 credentials") && e.contains("AWS_ACCESS_KEY_ID"), "{e}");
        let e = Config::load(&env_with(d.path(), &[("AWS_ACCESS_KEY_ID", "K")])).unwrap_err();
        assert!(e.contains("go together"), "{e}");
        let e = Config::load(&env_with(
            d.path(),
            &[("AWS_ACCESS_KEY_ID", "K"), ("AWS_SECRET_ACCESS_KEY", "S"), ("AWS_ENDPOINT_URL", "ftp://x")],
        ))
        .unwrap_err();
        assert!(e.contains("http:// or https://"), "{e}");
    }
}
