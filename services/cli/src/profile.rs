//! Where Chorus is and which key to show it: a profile in the configuration
//! file, the environment over it, and the local all-in-one's defaults under
//! both. A key never comes from the command line, where `ps` would show it.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fail::Fail;

/// The orchestrator the README's run command starts.
pub const DEFAULT_ADDRESS: &str = "http://127.0.0.1:50051";
/// Where that orchestrator writes its first admin key, relative to where it runs.
pub const LOCAL_ADMIN_KEY: &str = ".chorus/admin.key";

/// The configuration file: named profiles and which one is the default.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
}

/// One Chorus deployment and how to reach it.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// `http://host:port`, or `https://host:port` for TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// A file holding the API key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// The API key itself (the file must then be readable by its owner only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The PEM CA that signed the server's certificate (the system's roots
    /// without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// The name the server's certificate is for, when not the address's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_domain: Option<String>,
}

/// What a command connects with, resolved.
#[derive(Debug, Clone)]
pub struct Target {
    pub address: String,
    pub key: String,
    pub ca_file: Option<PathBuf>,
    pub tls_domain: Option<String>,
    /// Where each came from, for `chorus profile show`.
    pub origin: String,
}

/// The environment a profile is read with (the process's, or a test's).
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
}

/// The process's environment.
#[derive(Debug)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

/// The configuration file's path: `CHORUS_CONFIG`, else
/// `$XDG_CONFIG_HOME/chorus/config.toml`, else `~/.config/chorus/config.toml`.
pub fn config_path(env: &dyn Env) -> Result<PathBuf, Fail> {
    if let Some(path) = env.var("CHORUS_CONFIG") {
        return Ok(PathBuf::from(path));
    }
    if let Some(dir) = env.var("XDG_CONFIG_HOME") {
        return Ok(Path::new(&dir).join("chorus/config.toml"));
    }
    match env.var("HOME") {
        Some(home) => Ok(Path::new(&home).join(".config/chorus/config.toml")),
        None => Err(Fail::usage(
            "no configuration file: set CHORUS_CONFIG, XDG_CONFIG_HOME or HOME",
        )),
    }
}

impl Config {
    /// Reads the file; an empty configuration when there is none. A file
    /// holding a key that others may read is refused.
    pub fn load(path: &Path) -> Result<Self, Fail> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(Fail::usage(format!("cannot read {}: {e}", path.display()))),
        };
        let config: Self = toml::from_str(&text).map_err(|e| {
            Fail::usage(format!(
                "{} is not a valid configuration: {e}",
                path.display()
            ))
        })?;
        if config.profiles.values().any(|p| p.key.is_some()) {
            owner_only(path)?;
        }
        Ok(config)
    }

    /// Writes the file readable by its owner only, whole or not at all.
    pub fn save(&self, path: &Path) -> Result<(), Fail> {
        let text = toml::to_string_pretty(self)
            .map_err(|e| Fail::usage(format!("cannot write the configuration: {e}")))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)
            .map_err(|e| Fail::usage(format!("cannot make {}: {e}", dir.display())))?;
        let temporary = dir.join(format!(".config.toml.{}", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
            .and_then(|mut f| {
                f.write_all(text.as_bytes())?;
                f.sync_all()
            })
            .and_then(|()| std::fs::rename(&temporary, path));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&temporary);
            Fail::usage(format!("cannot write {}: {e}", path.display()))
        })
    }
}

/// Refuses a key file (or a configuration holding a key) that its group or
/// others may read.
fn owner_only(path: &Path) -> Result<(), Fail> {
    let mode = std::fs::metadata(path)
        .map_err(|e| Fail::usage(format!("cannot read {}: {e}", path.display())))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(Fail::usage(format!(
            "{} holds an API key but others may read it (mode {:o}); run: chmod 600 {}",
            path.display(),
            mode & 0o777,
            path.display()
        )));
    }
    Ok(())
}

/// Resolves what to connect with. Each setting comes from the first of: the
/// environment (`CHORUS_ADDRESS`, `CHORUS_API_KEY`, `CHORUS_API_KEY_FILE`,
/// `CHORUS_TLS_CA`, `CHORUS_TLS_DOMAIN`), the profile (`--profile`, else
/// `CHORUS_PROFILE`, else the file's default), the local all-in-one
/// (`http://127.0.0.1:50051`, `./.chorus/admin.key`).
pub fn resolve(env: &dyn Env, chosen: Option<&str>) -> Result<Target, Fail> {
    let path = config_path(env)?;
    let config = Config::load(&path)?;
    let name = chosen
        .map(str::to_owned)
        .or_else(|| env.var("CHORUS_PROFILE"))
        .or_else(|| config.default.clone());
    let profile = match &name {
        Some(name) => config.profiles.get(name).cloned().ok_or_else(|| {
            let known: Vec<&str> = config.profiles.keys().map(String::as_str).collect();
            Fail::usage(format!(
                "no profile '{name}' in {}; known: {}; add one with: chorus profile set {name} --address URL --key-file FILE",
                path.display(),
                if known.is_empty() { "none".to_owned() } else { known.join(", ") }
            ))
        })?,
        None => Profile::default(),
    };
    let from_profile = |what: &str| match &name {
        Some(n) => format!("{what} from profile '{n}' ({})", path.display()),
        None => format!("{what}: the local default"),
    };
    let (address, address_origin) = match (env.var("CHORUS_ADDRESS"), &profile.address) {
        (Some(a), _) => (a, "address from CHORUS_ADDRESS".to_owned()),
        (None, Some(a)) => (a.clone(), from_profile("address")),
        (None, None) => (DEFAULT_ADDRESS.to_owned(), from_profile("address")),
    };
    let (key, key_origin) = key(env, &profile, name.as_deref(), &path)?;
    Ok(Target {
        address: with_scheme(&address),
        key,
        ca_file: env
            .var("CHORUS_TLS_CA")
            .map(PathBuf::from)
            .or(profile.ca_file),
        tls_domain: env.var("CHORUS_TLS_DOMAIN").or(profile.tls_domain),
        origin: format!("{address_origin}; {key_origin}"),
    })
}

fn key(
    env: &dyn Env,
    profile: &Profile,
    name: Option<&str>,
    config: &Path,
) -> Result<(String, String), Fail> {
    if let Some(key) = env.var("CHORUS_API_KEY") {
        return Ok((key, "key from CHORUS_API_KEY".to_owned()));
    }
    if let Some(file) = env.var("CHORUS_API_KEY_FILE") {
        return Ok((
            read_key(Path::new(&file))?,
            format!("key from CHORUS_API_KEY_FILE ({file})"),
        ));
    }
    if let Some(key) = &profile.key {
        return Ok((
            key.clone(),
            format!("key in profile '{}'", name.unwrap_or_default()),
        ));
    }
    if let Some(file) = &profile.key_file {
        return Ok((read_key(file)?, format!("key from {}", file.display())));
    }
    let local = Path::new(LOCAL_ADMIN_KEY);
    if local.exists() {
        return Ok((read_key(local)?, format!("key from ./{LOCAL_ADMIN_KEY}")));
    }
    Err(Fail::usage(format!(
        "no API key: set CHORUS_API_KEY_FILE to a key file (the orchestrator's first admin key is <its directory>/{LOCAL_ADMIN_KEY}), or save a profile: chorus profile set NAME --address URL --key-file FILE (config: {})",
        config.display()
    )))
}

/// A key file's key (its first line), refused when others may read it.
fn read_key(path: &Path) -> Result<String, Fail> {
    owner_only(path)?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| Fail::usage(format!("cannot read the key file {}: {e}", path.display())))?;
    let key = text.lines().next().unwrap_or_default().trim().to_owned();
    if key.is_empty() {
        return Err(Fail::usage(format!(
            "the key file {} is empty",
            path.display()
        )));
    }
    Ok(key)
}

/// `host:port` becomes `http://host:port`.
fn with_scheme(address: &str) -> String {
    if address.contains("://") {
        address.to_owned()
    } else {
        format!("http://{address}")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    struct Vars(HashMap<&'static str, String>);

    impl Env for Vars {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).cloned()
        }
    }

    fn write(path: &Path, text: &str, mode: u32) {
        std::fs::write(path, text).expect("write");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn the_environment_wins_over_the_profile_and_the_profile_over_the_default() {
        let dir = tempfile::tempdir().expect("dir");
        let config = dir.path().join("config.toml");
        let key_file = dir.path().join("ops.key");
        write(&key_file, "chorus_ops_secret\n", 0o600);
        write(
            &config,
            &format!(
                "default = \"prod\"\n[profiles.prod]\naddress = \"https://chorus.example:443\"\nkey_file = \"{}\"\n",
                key_file.display()
            ),
            0o644,
        );
        let mut vars = Vars(HashMap::from([(
            "CHORUS_CONFIG",
            config.display().to_string(),
        )]));
        let target = resolve(&vars, None).expect("profile");
        assert_eq!(target.address, "https://chorus.example:443");
        assert_eq!(target.key, "chorus_ops_secret");
        vars.0.insert("CHORUS_ADDRESS", "127.0.0.1:7000".into());
        vars.0.insert("CHORUS_API_KEY", "chorus_env_secret".into());
        let target = resolve(&vars, None).expect("environment");
        assert_eq!(target.address, "http://127.0.0.1:7000");
        assert_eq!(target.key, "chorus_env_secret");
        assert!(!target.origin.contains("secret"), "{}", target.origin);
        let e = resolve(&vars, Some("staging")).expect_err("no such profile");
        assert!(e.message.contains("known: prod"), "{}", e.message);
    }

    #[test]
    fn a_key_others_can_read_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().expect("dir");
        let key_file = dir.path().join("admin.key");
        write(&key_file, "chorus_secret", 0o644);
        let vars = Vars(HashMap::from([
            (
                "CHORUS_CONFIG",
                dir.path().join("none.toml").display().to_string(),
            ),
            ("CHORUS_API_KEY_FILE", key_file.display().to_string()),
        ]));
        let e = resolve(&vars, None).expect_err("readable by others");
        assert!(e.message.contains("chmod 600"), "{}", e.message);

        let config = dir.path().join("config.toml");
        write(&config, "[profiles.p]\nkey = \"chorus_inline\"\n", 0o640);
        let vars = Vars(HashMap::from([(
            "CHORUS_CONFIG",
            config.display().to_string(),
        )]));
        let e = resolve(&vars, Some("p")).expect_err("a key in a readable file");
        assert!(e.message.contains("chmod 600"), "{}", e.message);
    }

    #[test]
    fn a_saved_configuration_reads_back_and_only_its_owner_can_read_it() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("sub/config.toml");
        let mut config = Config::default();
        config.profiles.insert(
            "local".into(),
            Profile {
                address: Some("http://127.0.0.1:50051".into()),
                key: Some("chorus_k".into()),
                ..Profile::default()
            },
        );
        config.default = Some("local".into());
        config.save(&path).expect("save");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(Config::load(&path).expect("load"), config);
    }
}
