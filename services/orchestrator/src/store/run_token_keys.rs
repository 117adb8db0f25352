//! The run-token signing keys replicas share (PostgreSQL): private keys
//! sealed with the secrets key (every replica has it: it opens the providers'
//! keys too), one current. Creating the set and rotating it take a
//! transaction-scoped advisory lock, so replicas that start or rotate at once
//! never make two current keys; a rotation is announced on
//! [`KEYS_CHANNEL`], and every replica also re-reads the set now and then.

use chorus_run_token::{MAX_TOKEN_TTL, SharedKey};
use diesel::prelude::*;

use super::connection::AnyConnection;
use super::schema::run_token_keys;
use super::{Db, Store, StoreError};
use crate::domain::now_ms;
use crate::secrets::SecretBox;

/// The PostgreSQL channel a rotation is announced on.
pub const KEYS_CHANNEL: &str = "chorus_keys";
/// Key of the advisory lock that serializes changes to the set.
const KEYS_LOCK: i64 = 0x0063_686f_7275_736b;

fn bound_to(kid: &str) -> Vec<u8> {
    format!("chorus run-token key\0{kid}").into_bytes()
}

type Row = (String, String, i64, Option<i64>);

fn load(conn: &mut AnyConnection, secrets: &SecretBox) -> Result<Vec<SharedKey>, StoreError> {
    let rows: Vec<Row> = run_token_keys::table
        .select((
            run_token_keys::kid,
            run_token_keys::private_key,
            run_token_keys::created_ms,
            run_token_keys::retired_ms,
        ))
        .order(run_token_keys::created_ms.asc())
        .load(conn)
        .db()?;
    rows.into_iter()
        .map(|(kid, sealed, created_ms, retired_ms)| {
            let private_pem =
                secrets
                    .open(&sealed, &bound_to(&kid))
                    .map_err(|e| StoreError::Corrupt {
                        what: "run-token key",
                        key: kid.clone(),
                        reason: format!("it does not open with this orchestrator's secrets key ({e}); every replica needs the same secrets key (--secrets-key-file or CHORUS_SECRETS_KEY)"),
                    })?;
            Ok(SharedKey {
                kid,
                private_pem,
                created_ms,
                retired_ms,
            })
        })
        .collect()
}

fn insert(
    conn: &mut AnyConnection,
    secrets: &SecretBox,
    key: &SharedKey,
) -> Result<(), StoreError> {
    diesel::insert_into(run_token_keys::table)
        .values((
            run_token_keys::kid.eq(&key.kid),
            run_token_keys::private_key.eq(secrets.seal(&key.private_pem, &bound_to(&key.kid))),
            run_token_keys::created_ms.eq(key.created_ms),
            run_token_keys::retired_ms.eq(key.retired_ms),
        ))
        .execute(conn)
        .db()?;
    Ok(())
}

fn lock(conn: &mut AnyConnection) -> Result<(), StoreError> {
    if let AnyConnection::Pg(c) = conn {
        diesel::sql_query(format!("SELECT pg_advisory_xact_lock({KEYS_LOCK})"))
            .execute(c)
            .db()?;
    }
    Ok(())
}

fn announce(conn: &mut AnyConnection) -> Result<(), StoreError> {
    if let AnyConnection::Pg(c) = conn {
        diesel::sql_query(format!("NOTIFY {KEYS_CHANNEL}"))
            .execute(c)
            .db()?;
    }
    Ok(())
}

impl Store {
    /// The shared key set; when the database has none yet, `local` (this
    /// replica's own set, from its key file) becomes it.
    pub async fn shared_run_token_keys(
        &self,
        local: Vec<SharedKey>,
    ) -> Result<Vec<SharedKey>, StoreError> {
        let secrets = self.secrets.clone();
        self.write(move |conn| {
            lock(conn)?;
            let stored = load(conn, &secrets)?;
            if !stored.is_empty() {
                return Ok(stored);
            }
            for key in &local {
                insert(conn, &secrets, key)?;
            }
            load(conn, &secrets)
        })
        .await
    }

    /// The shared key set as stored.
    pub async fn run_token_keys(&self) -> Result<Vec<SharedKey>, StoreError> {
        let secrets = self.secrets.clone();
        self.with_conn(move |conn| load(conn, &secrets)).await
    }

    /// Rotates the shared set: `new` becomes current, the current key is
    /// retired (it verifies what it signed until its tokens expire), keys
    /// retired longer than a token lives are deleted; every replica is told.
    pub async fn rotate_run_token_keys(
        &self,
        new: SharedKey,
    ) -> Result<Vec<SharedKey>, StoreError> {
        let secrets = self.secrets.clone();
        self.write(move |conn| {
            lock(conn)?;
            let now = now_ms();
            diesel::update(run_token_keys::table.filter(run_token_keys::retired_ms.is_null()))
                .set(run_token_keys::retired_ms.eq(Some(now)))
                .execute(conn)
                .db()?;
            let keep_ms = i64::try_from(MAX_TOKEN_TTL.as_millis()).unwrap_or(i64::MAX);
            diesel::delete(
                run_token_keys::table.filter(run_token_keys::retired_ms.lt(now - keep_ms)),
            )
            .execute(conn)
            .db()?;
            insert(conn, &secrets, &new)?;
            announce(conn)?;
            load(conn, &secrets)
        })
        .await
    }
}
