//! `/api/v1/topics/{topic}/parked`: the keys a topic with `park_on_dead` holds back behind a
//! dead event (contract section 13), each with its dead event and how many events wait.

use actix_web::{web, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::error::ApiResult;
use super::{valid_topic, TopicPath};
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
