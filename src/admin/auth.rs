//! Who may do what on the admin server: the configured tokens and the roles they grant.
//!
//! The API presents a token as `Authorization: Bearer <token>`; the UI exchanges it once at
//! its login page for a session cookie. Both end here, in [`Tokens::role_for`], which compares
//! in constant time so that response timing does not reveal how much of a guess was right.

use actix_web::cookie::Key;
use sha2::{Digest, Sha512};
use subtle::ConstantTimeEq;

use crate::config::AdminSettings;

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Look and act: retry, discard, pause, resume, enqueue.
    Admin,
    /// Look only (`admin.read_only_token`).
    ReadOnly,
}

impl Role {
    /// True when this role may change state.
    pub fn can_act(self) -> bool {
        self == Role::Admin
    }
}

/// The tokens the admin server accepts, and the UI session key they make.
#[derive(Clone)]
pub struct Tokens {
    admin: Option<Vec<u8>>,
    read_only: Option<Vec<u8>>,
    session_key: Key,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("admin", &self.admin.as_ref().map(|_| "<set>"))
            .field("read_only", &self.read_only.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl Tokens {
    /// The tokens of the settings; empty strings count as unset.
    pub fn from_settings(admin: &AdminSettings) -> Tokens {
        let some = |t: &Option<String>| {
            t.as_deref()
                .filter(|t| !t.is_empty())
                .map(|t| t.as_bytes().to_vec())
        };
        let (admin, read_only) = (some(&admin.token), some(&admin.read_only_token));
        let session_key = match &admin {
            Some(admin) => Key::from(&derive_session_key(admin, read_only.as_deref())),
            // The UI is open and served on loopback only: a key of this process is enough
            // for the CSRF check.
            None => Key::generate(),
        };
        Tokens {
            admin,
            read_only,
            session_key,
        }
    }

    /// True when no token is set: the admin is open to all (and served on loopback only).
    pub fn open(&self) -> bool {
        self.admin.is_none()
    }

    /// The role a presented token grants, if any. With no token configured every caller is
    /// [`Role::Admin`].
    pub fn role_for(&self, presented: Option<&str>) -> Option<Role> {
        let Some(admin) = &self.admin else {
            return Some(Role::Admin);
        };
        let presented = presented?.as_bytes();
        // Both comparisons always run, so timing does not tell which token matched.
        let is_admin: bool = admin.as_slice().ct_eq(presented).into();
        let is_reader: bool = self
            .read_only
            .as_deref()
            .map(|r| r.ct_eq(presented).into())
            .unwrap_or(false);
        if is_admin {
            Some(Role::Admin)
        } else if is_reader {
            Some(Role::ReadOnly)
        } else {
            None
        }
    }
}

impl Tokens {
    /// The key that encrypts and authenticates UI session cookies. Derived from the
    /// configured tokens, so every replica given the same tokens accepts the same cookies (no
    /// session table), and changing either token ends every session. With no token it is
    /// random per process.
    pub fn session_key(&self) -> &Key {
        &self.session_key
    }
}

/// The 64 bytes of a cookie [`Key`] (signing and encryption halves) from the tokens.
fn derive_session_key(admin: &[u8], read_only: Option<&[u8]>) -> [u8; 64] {
    let mut hash = Sha512::new();
    hash.update(b"outbox-relay ui session v2\0");
    // The length first, so that no other split of the same bytes into two tokens gives the
    // same key.
    hash.update((admin.len() as u64).to_be_bytes());
    hash.update(admin);
    hash.update(read_only.unwrap_or_default());
    hash.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(admin: Option<&str>, ro: Option<&str>) -> Tokens {
        Tokens::from_settings(&AdminSettings {
            addr: "127.0.0.1:0".into(),
            token: admin.map(str::to_string),
            read_only_token: ro.map(str::to_string),
            ..AdminSettings::default()
        })
    }

    #[test]
    fn the_session_key_follows_both_tokens() {
        let key = |admin, ro| tokens(Some(admin), ro).session_key().master().to_vec();
        assert_eq!(key("s3cret", Some("look")), key("s3cret", Some("look")));
        assert_ne!(key("s3cret", Some("look")), key("s3cret", None));
        assert_ne!(key("s3cret", Some("look")), key("other", Some("look")));
        assert_ne!(key("ab", Some("c")), key("a", Some("bc")));
    }

    #[test]
    fn no_token_means_open() {
        let t = tokens(None, None);
        assert!(t.open());
        assert_eq!(t.role_for(None), Some(Role::Admin));
    }

    #[test]
    fn tokens_grant_their_roles_and_nothing_else() {
        let t = tokens(Some("s3cret"), Some("look"));
        assert!(!t.open());
        assert_eq!(t.role_for(Some("s3cret")), Some(Role::Admin));
        assert_eq!(t.role_for(Some("look")), Some(Role::ReadOnly));
        assert_eq!(t.role_for(Some("s3cre")), None);
        assert_eq!(t.role_for(Some("s3cret ")), None);
        assert_eq!(t.role_for(Some("")), None);
        assert_eq!(t.role_for(None), None);
        assert!(!Role::ReadOnly.can_act());
    }
}
