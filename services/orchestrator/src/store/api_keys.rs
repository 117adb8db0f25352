//! API keys: created, looked up by id, listed, revoked. Only hashes are stored.

use chorus_auth::Role;
use diesel::prelude::*;

use super::connection::AnyConnection;
use super::rows::ApiKeyRow;
use super::schema::api_keys;
use super::{Db, Store, StoreError, or_exists};
use crate::domain::{ApiKeyRecord, now_ms};

impl Store {
    /// Stores a new key. ALREADY_EXISTS when a key that is not revoked has its name.
    pub async fn create_api_key(&self, key: ApiKeyRecord) -> Result<ApiKeyRecord, StoreError> {
        self.write(move |conn| {
            or_exists(
                diesel::insert_into(api_keys::table)
                    .values(ApiKeyRow::from_domain(&key))
                    .execute(conn),
                "api key",
                &key.name,
            )?;
            Ok(key)
        })
        .await
    }

    pub async fn get_api_key(&self, id: String) -> Result<ApiKeyRecord, StoreError> {
        self.with_conn(move |conn| load_key(conn, &id)).await
    }

    /// Keys by creation time; revoked ones only when asked.
    pub async fn list_api_keys(
        &self,
        include_revoked: bool,
    ) -> Result<Vec<ApiKeyRecord>, StoreError> {
        self.with_conn(move |conn| {
            let mut query = api_keys::table
                .select(ApiKeyRow::as_select())
                .order((api_keys::created_ms, api_keys::id))
                .into_boxed();
            if !include_revoked {
                query = query.filter(api_keys::revoked_ms.is_null());
            }
            query
                .load(conn)
                .db()?
                .into_iter()
                .map(ApiKeyRow::into_domain)
                .collect()
        })
        .await
    }

    /// Revokes a key (a key already revoked keeps its first revocation time).
    pub async fn revoke_api_key(&self, id: String) -> Result<ApiKeyRecord, StoreError> {
        self.write(move |conn| {
            let key = load_key(conn, &id)?;
            if key.role == Role::Admin && key.revoked_ms.is_none() {
                let admins = active_admins_locked(conn)?;
                if admins.len() == 1 && admins[0] == id {
                    return Err(StoreError::LastAdminKey { id });
                }
            }
            diesel::update(api_keys::table.find(&id))
                .filter(api_keys::revoked_ms.is_null())
                .set(api_keys::revoked_ms.eq(now_ms()))
                .execute(conn)
                .db()?;
            load_key(conn, &id)
        })
        .await
    }

    /// How many keys of `role` are not revoked.
    pub async fn count_active_api_keys(&self, role: Role) -> Result<u64, StoreError> {
        self.with_conn(move |conn| {
            let n: i64 = api_keys::table
                .filter(api_keys::role.eq(role.as_str()))
                .filter(api_keys::revoked_ms.is_null())
                .count()
                .get_result(conn)
                .db()?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
        .await
    }
}

/// The ids of the admin keys not revoked, locked until the transaction ends
/// on PostgreSQL (two revocations at once cannot both leave one admin key
/// each; on SQLite the write transaction already holds the database).
fn active_admins_locked(conn: &mut AnyConnection) -> Result<Vec<String>, StoreError> {
    let query = api_keys::table
        .filter(api_keys::role.eq(Role::Admin.as_str()))
        .filter(api_keys::revoked_ms.is_null())
        .select(api_keys::id)
        .order(api_keys::id);
    match conn {
        AnyConnection::Pg(c) => query.for_update().load(c),
        AnyConnection::Sqlite(c) => query.load(c),
    }
    .db()
}

fn load_key(conn: &mut AnyConnection, id: &str) -> Result<ApiKeyRecord, StoreError> {
    api_keys::table
        .find(id)
        .select(ApiKeyRow::as_select())
        .first(conn)
        .optional()
        .db()?
        .ok_or_else(|| StoreError::not_found("api key", id))?
        .into_domain()
}
