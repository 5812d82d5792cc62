//! Parked keys (contract section 13). `/api/v1/topics/{topic}/parked`: the keys a topic with
//! `park_on_dead` holds back behind a dead event, each with its dead event and how many events
//! wait. `/api/v1/topics/{topic}/groups/{group}/parked`: the keys a consumer group that parks
//! keys holds behind a dead-lettered entry, and their release (discard or redrive).

use actix_web::{web, HttpResponse};
use outbox_core::parked::Release;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::error::{ApiError, ApiResult};
use super::openapi::TopicName;
use super::{valid_topic, TopicPath};
use crate::admin::caller::Caller;
use crate::admin::AdminState;
use crate::db::outbox::parked::{self, ParkedKey};

/// A topic's parked keys.
#[derive(Debug, Serialize, ToSchema)]
pub struct ParkedKeys {
    /// By key; empty when nothing is parked or the topic does not park its keys.
    pub keys: Vec<Parked>,
}

/// One parked key.
#[derive(Debug, Serialize, ToSchema)]
pub struct Parked {
    /// The partition key.
    pub key: String,
    /// Its first dead event: retried and published, or discarded, it releases the key.
    pub dead_id: Uuid,
    /// Its pending events waiting behind that one.
    #[schema(minimum = 0)]
    pub held: i64,
}

impl From<ParkedKey> for Parked {
    fn from(p: ParkedKey) -> Self {
        Parked {
            key: p.key,
            dead_id: p.dead_id,
            held: p.held,
        }
    }
}

/// The keys of the topic held back behind a dead event (`park_on_dead` on its `[[topics]]`
/// entry).
#[utoipa::path(get, path = "/api/v1/topics/{topic}/parked", tag = "topics", operation_id = "listParkedKeys", params(TopicPath),
    responses((status = 200, body = ParkedKeys), (status = 400), (status = 401), (status = 503)))]
pub async fn list(
    state: web::Data<AdminState>,
    topic: web::Path<TopicPath>,
) -> ApiResult<HttpResponse> {
    valid_topic(&topic.topic)?;
    let keys = state
        .db
        .unit(async |c| parked::parked_keys(c, Some(&topic.topic)).await)
        .await?;
    Ok(HttpResponse::Ok().json(ParkedKeys {
        keys: keys.into_iter().map(Parked::from).collect(),
    }))
}

/// The `{topic}` and `{group}` of a group's parked keys.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct GroupPath {
    /// The topic.
    #[param(value_type = TopicName)]
    pub topic: String,
    /// The consumer group.
    #[param(min_length = 1, pattern = "^[^\\x00]+$")]
    pub group: String,
}

/// The `{topic}`, `{group}` and `{key}` of one parked key.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct KeyPath {
    /// The topic.
    #[param(value_type = TopicName)]
    pub topic: String,
    /// The consumer group.
    #[param(min_length = 1, pattern = "^[^\\x00]+$")]
    pub group: String,
    /// The partition key.
    #[param(min_length = 1, pattern = "^[^\\x00]+$")]
    pub key: String,
}

/// A group and key as the paths take them: not empty, no NUL.
fn valid_name(what: &str, text: &str) -> ApiResult<()> {
    if text.is_empty() || text.contains('\0') {
        return Err(ApiError::BadRequest(format!(
            "{what} must be a non-empty text without NUL"
        )));
    }
    Ok(())
}

/// The keys the consumer group parks on the topic (its consumers run with `park_keys`).
#[utoipa::path(get, path = "/api/v1/topics/{topic}/groups/{group}/parked", tag = "topics", operation_id = "listGroupParkedKeys", params(GroupPath),
    responses((status = 200, body = ParkedKeys), (status = 400), (status = 401), (status = 503)))]
pub async fn group_list(
    state: web::Data<AdminState>,
    path: web::Path<GroupPath>,
) -> ApiResult<HttpResponse> {
    valid_topic(&path.topic)?;
    valid_name("group", &path.group)?;
    let keys = state
        .publisher
        .group_parked(&path.topic, &path.group)
        .await
        .map_err(|e| ApiError::RedisUnavailable(e.to_string()))?;
    let keys = keys
        .into_iter()
        .filter(|k| !k.state.released)
        .filter_map(|k| {
            Some(Parked {
                dead_id: Uuid::parse_str(&k.state.dead_id).ok()?,
                key: k.key,
                held: i64::try_from(k.held).unwrap_or(i64::MAX),
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(ParkedKeys { keys }))
}

/// How many entries a release lets take effect.
#[derive(Debug, Serialize, ToSchema)]
pub struct Released {
    /// The held entries (and, for a redrive, the dead entry), handled by the group's consumers
    /// in their order.
    #[schema(minimum = 0)]
    pub released: u64,
}

async fn release(
    state: &AdminState,
    caller: &Caller,
    path: &KeyPath,
    how: Release,
) -> ApiResult<HttpResponse> {
    valid_topic(&path.topic)?;
    valid_name("group", &path.group)?;
    valid_name("key", &path.key)?;
    let released = state
        .actions()
        .release_parked(
            &state.publisher,
            &caller.who,
            &path.topic,
            &path.group,
            &path.key,
            how,
        )
        .await?;
    Ok(HttpResponse::Ok().json(Released { released }))
}

/// Discards a parked key's dead entry (it stays in the dead stream): the held entries take
/// effect in their order, then the key flows; recorded in the audit log.
#[utoipa::path(post, path = "/api/v1/topics/{topic}/groups/{group}/parked/{key}/discard", tag = "topics", operation_id = "discardParkedKey", params(KeyPath),
    responses((status = 200, body = Released), (status = 400), (status = 401), (status = 403), (status = 404), (status = 503)))]
pub async fn discard(
    state: web::Data<AdminState>,
    caller: Caller,
    path: web::Path<KeyPath>,
) -> ApiResult<HttpResponse> {
    release(&state, &caller, &path, Release::Discard).await
}

/// Redrives a parked key: its dead entry is handled again first, then the held ones in order;
/// failing again, it is dead again and the key stays parked. Recorded in the audit log.
#[utoipa::path(post, path = "/api/v1/topics/{topic}/groups/{group}/parked/{key}/redrive", tag = "topics", operation_id = "redriveParkedKey", params(KeyPath),
    responses((status = 200, body = Released), (status = 400), (status = 401), (status = 403), (status = 404), (status = 409), (status = 503)))]
pub async fn redrive(
    state: web::Data<AdminState>,
    caller: Caller,
    path: web::Path<KeyPath>,
) -> ApiResult<HttpResponse> {
    release(&state, &caller, &path, Release::Redrive).await
}
