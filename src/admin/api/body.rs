//! [`Object`]: a JSON request body that must be a JSON object. actix's `Json<T>` lets serde
//! read a struct from an array too (`[]` became an empty bulk filter, `["t", {}]` an event),
//! which the OpenAPI document does not allow and a client never means.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::{web, FromRequest, HttpRequest};
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A body read as a JSON object, then as `T`; anything else is a 400 through the
/// [`JsonConfig`](actix_web::web::JsonConfig) of the API.
#[derive(Debug)]
pub struct Object<T>(pub T);

impl<T> Object<T> {
    /// The body.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> std::ops::Deref for Object<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: DeserializeOwned + 'static> FromRequest for Object<T> {
    type Error = actix_web::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let map =
            web::Json::<serde_json::Map<String, serde_json::Value>>::from_request(req, payload);
        Box::pin(async move {
            let map = map.await?.into_inner();
            serde_json::from_value(serde_json::Value::Object(map))
                .map(Object)
                .map_err(|e| ApiError::BadRequest(format!("bad JSON body: {e}")).into())
        })
    }
}

/// An optional whole number that JSON may spell `5` or `5.0` (JSON Schema's `integer`
/// counts both; serde's `i64` takes only the first).
pub fn whole_number<'de, D>(d: D) -> Result<Option<i64>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct Whole;

    impl serde::de::Visitor<'_> for Whole {
        type Value = Option<i64>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a whole number or null")
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Self::Value, E> {
            Ok(Some(n))
        }

        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Self::Value, E> {
            i64::try_from(n)
                .map(Some)
                .map_err(|_| E::custom(format!("{n} is too large")))
        }

        fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Self::Value, E> {
            // Within ±2^63 an integral f64 converts exactly.
            if n.fract() == 0.0 && n.abs() < 9.2e18 {
                Ok(Some(n as i64))
            } else {
                Err(E::custom(format!("{n} is not a whole number")))
            }
        }
    }

    d.deserialize_any(Whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct T {
        #[serde(default, deserialize_with = "whole_number")]
        n: Option<i64>,
    }

    fn n(json: &str) -> Result<Option<i64>, serde_json::Error> {
        serde_json::from_str::<T>(json).map(|t| t.n)
    }

    #[test]
    fn whole_numbers_in_either_spelling_and_nothing_else() {
        assert_eq!(n(r#"{"n": 5}"#).ok(), Some(Some(5)));
        assert_eq!(n(r#"{"n": 3829077.0}"#).ok(), Some(Some(3_829_077)));
        assert_eq!(n(r#"{"n": -2}"#).ok(), Some(Some(-2)));
        assert_eq!(n(r#"{"n": null}"#).ok(), Some(None));
        assert_eq!(n(r#"{}"#).ok(), Some(None));
        assert!(n(r#"{"n": 1.5}"#).is_err());
        assert!(n(r#"{"n": 1e300}"#).is_err());
        assert!(n(r#"{"n": 18446744073709551615}"#).is_err());
        assert!(n(r#"{"n": "5"}"#).is_err());
    }
}
