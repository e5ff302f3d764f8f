//! Idempotent retries: a client names a request with an `Idempotency-Key`
//! header; a retry with the same key (after a lost response, say) gets the
//! reply the first one got and never runs the command twice. A session
//! remembers the reply of its last keyed step only (memory stays bounded:
//! one reply per open session), and a keyed create is found again by its
//! key while its session is registered.

use axum::body::Bytes;
use axum::http::HeaderMap;

use super::error::ApiError;

/// The header that names a request.
pub const HEADER: &str = "idempotency-key";

/// Longest key accepted, in bytes.
pub const MAX_LEN: usize = 255;

/// A client's name for one request: 1-255 visible ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key(String);

impl Key {
    /// The key of a request, if it has one; a malformed key is a 400.
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<Key>, ApiError> {
        let mut values = headers.get_all(HEADER).iter();
        let Some(value) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(ApiError::BadRequest(
                "Idempotency-Key: give one key, not several".into(),
            ));
        }
        let text = value.to_str().unwrap_or_default();
        if text.is_empty() || text.len() > MAX_LEN || !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ApiError::BadRequest(format!(
                "Idempotency-Key: 1-{MAX_LEN} visible ASCII characters (no spaces)"
            )));
        }
        Ok(Some(Key(text.to_string())))
    }

    /// The key as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The last keyed reply of a session.
#[derive(Debug, Clone)]
pub struct Remembered {
    /// The request's key.
    pub key: Key,
    /// A hash of what the request asked (a reuse of the key for another
    /// request is refused, not answered with the wrong reply).
    pub fingerprint: u64,
    /// The JSON body of the reply, as first sent.
    pub body: Bytes,
}

impl Remembered {
    /// The stored reply to a request with `key` asking `fingerprint`:
    /// `Ok(None)` for another key, a 422 for this key with another request.
    pub fn replay(&self, key: &Key, fingerprint: u64) -> Result<Option<Bytes>, ApiError> {
        if &self.key != key {
            return Ok(None);
        }
        if self.fingerprint != fingerprint {
            return Err(ApiError::Other(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                format!(
                    "Idempotency-Key {:?} was used for a different request on this session",
                    key.as_str()
                ),
            ));
        }
        Ok(Some(self.body.clone()))
    }
}

/// The 422 for a create's key sent again with another create.
pub fn reused_for_create(key: &Key) -> ApiError {
    ApiError::Other(
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        format!(
            "Idempotency-Key {:?} was used for a different create",
            key.as_str()
        ),
    )
}

/// A stable hash of a request's content (FNV-1a over its parts, each
/// length-prefixed so that the split between parts counts).
pub fn fingerprint(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for part in parts {
        eat(&(part.len() as u64).to_le_bytes());
        eat(part);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(HEADER, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn keys_are_parsed_and_bad_ones_refused() {
        assert_eq!(Key::from_headers(&HeaderMap::new()).unwrap(), None);
        let k = Key::from_headers(&headers(&["step-1"])).unwrap().unwrap();
        assert_eq!(k.as_str(), "step-1");
        for bad in [&["a b"][..], &[""], &["a", "b"]] {
            let e = Key::from_headers(&headers(bad)).unwrap_err();
            assert_eq!(e.status(), 400, "{bad:?}");
            assert!(e.to_string().contains("Idempotency-Key"), "{e}");
        }
        let long = "k".repeat(MAX_LEN + 1);
        assert!(Key::from_headers(&headers(&[&long])).is_err());
    }

    #[test]
    fn a_replay_needs_the_same_key_and_request() {
        let key = Key("k1".into());
        let r = Remembered {
            key: key.clone(),
            fingerprint: fingerprint(&[b"ls"]),
            body: Bytes::from_static(b"{\"done\":false}"),
        };
        assert_eq!(
            r.replay(&key, fingerprint(&[b"ls"])).unwrap().unwrap(),
            Bytes::from_static(b"{\"done\":false}")
        );
        assert_eq!(r.replay(&Key("k2".into()), 0).unwrap(), None);
        assert_eq!(
            r.replay(&key, fingerprint(&[b"rm -rf /"]))
                .unwrap_err()
                .status(),
            422
        );
        assert_ne!(fingerprint(&[b"ab", b"c"]), fingerprint(&[b"a", b"bc"]));
    }
}
