//! The first admin key: made on a start that finds no admin key in the store,
//! written owner-only to a file, so that one command runs a usable system.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use chorus_auth::{ApiKey, Role};
use tracing::info;

use crate::domain::{ApiKeyRecord, Name, now_ms};
use crate::error::ServiceError;
use crate::store::{Store, StoreError};

/// Creates an admin key and writes it to `file` (mode 0600, replacing what was
/// there) when the store has no admin key that is not revoked. Returns whether
/// it did.
///
/// # Errors
/// INTERNAL when the store or the file cannot be written.
pub async fn ensure_admin_key(store: &Store, file: &Path) -> Result<bool, ServiceError> {
    if store.count_active_api_keys(Role::Admin).await? > 0 {
        return Ok(false);
    }
    let key = ApiKey::generate();
    let now = now_ms();
    let mut record = ApiKeyRecord {
        id: key.id().to_owned(),
        name: Name::parse("key name", "admin")?,
        role: Role::Admin,
        hash: key.hash(),
        created_ms: now,
        revoked_ms: None,
    };
    // Write the file first: a key nobody can read is worse than none.
    write_secret(file, key.expose()).map_err(|e| {
        ServiceError::Unavailable(format!(
            "cannot write the admin key to {}: {e}",
            file.display()
        ))
    })?;
    match store.create_api_key(record.clone()).await {
        Err(StoreError::AlreadyExists { .. }) => {
            // A key named "admin" with another role exists: keep both apart.
            record.name = Name::parse("key name", &format!("admin-{now}"))?;
            store.create_api_key(record).await?;
        }
        other => {
            other?;
        }
    }
    info!(
        file = %file.display(),
        "created the first admin key; call the API with: grpcurl -H \"authorization: Bearer $(cat {})\" ...",
        file.display()
    );
    Ok(true)
}

fn write_secret(file: &Path, secret: &str) -> std::io::Result<()> {
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let temp = file.with_extension(format!("tmp-{}", std::process::id()));
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)?;
    out.write_all(secret.as_bytes())?;
    out.write_all(b"\n")?;
    out.sync_all()?;
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o600))?;
    std::fs::rename(&temp, file)
}

/// Accepts the API key in `file` as tool-exec's: when the store does not hold
/// it, it is stored (its hash) with role `tool-exec`. A deployment gives a
/// separate tool-exec its key as a mounted secret and the orchestrator the same
/// file, so the two shapes need no CreateApiKey call to start. The file is read,
/// never written. Returns whether the key was new.
///
/// # Errors
/// UNAVAILABLE when the file cannot be read or holds no API key, or when the
/// store holds a key of that id with another secret, another role, or revoked
/// (the message says what to do); INTERNAL when the store fails.
pub async fn accept_tool_exec_key(store: &Store, file: &Path) -> Result<bool, ServiceError> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        ServiceError::Unavailable(format!(
            "cannot read tool-exec's key from {}: {e}",
            file.display()
        ))
    })?;
    let key = ApiKey::parse(text.trim()).ok_or_else(|| {
        ServiceError::Unavailable(format!(
            "{} does not hold an API key (chorus_<16 hex digits>_<32 bytes in base64url>); deploy/README.md shows how to make one",
            file.display()
        ))
    })?;
    let now = now_ms();
    let mut name = "tool-exec".to_owned();
    for _ in 0..2 {
        match store.get_api_key(key.id().to_owned()).await {
            Ok(stored) => return check_stored_tool_exec_key(&stored, &key, file).map(|()| false),
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let record = ApiKeyRecord {
            id: key.id().to_owned(),
            name: Name::parse("key name", &name)?,
            role: Role::ToolExec,
            hash: key.hash(),
            created_ms: now,
            revoked_ms: None,
        };
        match store.create_api_key(record).await {
            Ok(_) => {
                info!(file = %file.display(), id = key.id(), "accepted tool-exec's key from its file");
                return Ok(true);
            }
            // Another key holds the name, or another orchestrator stored this one
            // a moment ago: look again, under a name of its own.
            Err(StoreError::AlreadyExists { .. }) => name = format!("tool-exec-{now}"),
            Err(e) => return Err(e.into()),
        }
    }
    let stored = store.get_api_key(key.id().to_owned()).await?;
    check_stored_tool_exec_key(&stored, &key, file)?;
    Ok(false)
}

/// The stored key of the file's id must be this very key, active, of role tool-exec.
fn check_stored_tool_exec_key(
    stored: &ApiKeyRecord,
    key: &ApiKey,
    file: &Path,
) -> Result<(), ServiceError> {
    let problem = if !key.matches(&stored.hash) {
        "another key with the same id is stored"
    } else if !stored.is_active() {
        "it was revoked"
    } else if stored.role != Role::ToolExec {
        "it is stored with another role"
    } else {
        return Ok(());
    };
    Err(ServiceError::Unavailable(format!(
        "the key in {} (id {}) cannot be tool-exec's: {problem}; put a new key in the file for both services",
        file.display(),
        key.id()
    )))
}
