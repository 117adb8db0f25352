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
