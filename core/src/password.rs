//! Password hashing compatible with RabbitMQ's `rabbit_password_hashing_*` modules.
//!
//! RabbitMQ stores a user's `password_hash` as `base64(salt ++ H(salt ++ utf8(password)))`
//! with a 4-byte random salt, where `H` is chosen by the user's `hashing_algorithm`. Keeping the
//! same layout means hashes exported from a RabbitMQ node (`definitions.json`) log in unchanged
//! on Warren, and hashes Warren writes can be imported back into RabbitMQ.
//!
//! An empty `password_hash` is RabbitMQ's way of saying "this user cannot log in with a
//! password" (for example a user that authenticates with a client certificate); it is kept as a
//! [`PasswordHash`] whose [`PasswordHash::verify`] always fails.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use md5::Md5;
use rand::RngCore as _;
use sha2::{Sha256, Sha512};

/// Length of the random salt prefix, in bytes, as RabbitMQ uses.
pub const SALT_LENGTH: usize = 4;

/// A hash function RabbitMQ can use for stored passwords.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HashingAlgorithm {
    /// `rabbit_password_hashing_sha256`, RabbitMQ's default since 3.6.
    #[default]
    Sha256,
    /// `rabbit_password_hashing_sha512`.
    Sha512,
    /// `rabbit_password_hashing_md5`, used by RabbitMQ before 3.6; kept for old exports.
    Md5,
}

impl HashingAlgorithm {
    /// Every algorithm, in the order RabbitMQ documents them.
    pub const ALL: [HashingAlgorithm; 3] = [
        HashingAlgorithm::Sha256,
        HashingAlgorithm::Sha512,
        HashingAlgorithm::Md5,
    ];

    /// The algorithm named by a RabbitMQ `hashing_algorithm` value such as
    /// `rabbit_password_hashing_sha256`; `None` for any other name.
    pub fn from_rabbit_name(name: &str) -> Option<HashingAlgorithm> {
        HashingAlgorithm::ALL
            .into_iter()
            .find(|algorithm| algorithm.rabbit_name() == name)
    }

    /// The name RabbitMQ writes in `hashing_algorithm` for this algorithm.
    pub fn rabbit_name(self) -> &'static str {
        match self {
            HashingAlgorithm::Sha256 => "rabbit_password_hashing_sha256",
            HashingAlgorithm::Sha512 => "rabbit_password_hashing_sha512",
            HashingAlgorithm::Md5 => "rabbit_password_hashing_md5",
        }
    }

    /// The length of the digest this algorithm produces, in bytes.
    pub fn digest_length(self) -> usize {
        match self {
            HashingAlgorithm::Sha256 => 32,
            HashingAlgorithm::Sha512 => 64,
            HashingAlgorithm::Md5 => 16,
        }
    }

    /// `H(salt ++ utf8(password))`.
    fn digest(self, salt: &[u8], password: &str) -> Vec<u8> {
        fn run<D: sha2::Digest>(salt: &[u8], password: &str) -> Vec<u8> {
            let mut hasher = D::new();
            hasher.update(salt);
            hasher.update(password.as_bytes());
            hasher.finalize().to_vec()
        }
        match self {
            HashingAlgorithm::Sha256 => run::<Sha256>(salt, password),
            HashingAlgorithm::Sha512 => run::<Sha512>(salt, password),
            HashingAlgorithm::Md5 => run::<Md5>(salt, password),
        }
    }
}

impl std::fmt::Display for HashingAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.rabbit_name())
    }
}

/// A stored password: the algorithm and `salt ++ H(salt ++ password)`, RabbitMQ's layout.
///
/// An empty `salted_hash` means the user cannot log in with a password at all.
#[derive(Clone, PartialEq, Eq)]
pub struct PasswordHash {
    /// The hash function applied to `salt ++ password`.
    pub algorithm: HashingAlgorithm,
    /// The 4-byte salt followed by the digest; empty for a user without a password.
    pub salted_hash: Vec<u8>,
}

impl PasswordHash {
    /// Hashes `password` with a fresh random salt and SHA-256, RabbitMQ's default.
    pub fn new(password: &str) -> PasswordHash {
        PasswordHash::with_algorithm(HashingAlgorithm::Sha256, password)
    }

    /// Hashes `password` with a fresh random salt and the given algorithm.
    pub fn with_algorithm(algorithm: HashingAlgorithm, password: &str) -> PasswordHash {
        let mut salt = [0u8; SALT_LENGTH];
        rand::thread_rng().fill_bytes(&mut salt);
        PasswordHash::with_salt(algorithm, salt, password)
    }

    /// Hashes `password` with a caller-chosen salt: deterministic, for tests and known vectors.
    pub fn with_salt(
        algorithm: HashingAlgorithm,
        salt: [u8; SALT_LENGTH],
        password: &str,
    ) -> PasswordHash {
        let mut salted_hash = salt.to_vec();
        salted_hash.extend_from_slice(&algorithm.digest(&salt, password));
        PasswordHash {
            algorithm,
            salted_hash,
        }
    }

    /// A user that cannot log in with a password (RabbitMQ's empty `password_hash`).
    pub fn no_password() -> PasswordHash {
        PasswordHash {
            algorithm: HashingAlgorithm::default(),
            salted_hash: Vec::new(),
        }
    }

    /// Reads a hash as RabbitMQ exports it: the `hashing_algorithm` name and the base64
    /// `password_hash`. An empty hash yields [`PasswordHash::no_password`].
    ///
    /// Fails on an unknown algorithm name, on text that is not base64, and on a decoded hash
    /// whose length is not the salt plus that algorithm's digest, so a damaged hash is reported
    /// at load time rather than turning into a user who silently cannot log in.
    pub fn from_rabbit(
        algorithm_name: &str,
        base64_hash: &str,
    ) -> Result<PasswordHash, PasswordHashError> {
        let algorithm = HashingAlgorithm::from_rabbit_name(algorithm_name)
            .ok_or_else(|| PasswordHashError::UnknownAlgorithm(algorithm_name.to_owned()))?;
        if base64_hash.is_empty() {
            return Ok(PasswordHash {
                algorithm,
                salted_hash: Vec::new(),
            });
        }
        let salted_hash = BASE64
            .decode(base64_hash)
            .map_err(|error| PasswordHashError::InvalidBase64(error.to_string()))?;
        let expected = SALT_LENGTH + algorithm.digest_length();
        if salted_hash.len() != expected {
            return Err(PasswordHashError::WrongLength {
                algorithm,
                expected,
                actual: salted_hash.len(),
            });
        }
        Ok(PasswordHash {
            algorithm,
            salted_hash,
        })
    }

    /// Whether the user may log in with a password at all.
    pub fn allows_password_login(&self) -> bool {
        !self.salted_hash.is_empty()
    }

    /// Whether `password` matches. The digest comparison takes the same time wherever the first
    /// difference is, so response timing does not reveal how much of a guess was right.
    pub fn verify(&self, password: &str) -> bool {
        if self.salted_hash.len() <= SALT_LENGTH {
            return false;
        }
        let (salt, stored) = self.salted_hash.split_at(SALT_LENGTH);
        let computed = self.algorithm.digest(salt, password);
        constant_time_equal(stored, &computed)
    }

    /// The hash as RabbitMQ writes `password_hash`: base64 of `salt ++ digest` (empty for a user
    /// without a password).
    pub fn to_base64(&self) -> String {
        BASE64.encode(&self.salted_hash)
    }
}

impl std::fmt::Debug for PasswordHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A hash is not a secret in RabbitMQ's model (it is exported), but it need not end up in
        // logs either: show what it is, not its bytes.
        f.debug_struct("PasswordHash")
            .field("algorithm", &self.algorithm)
            .field("allows_password_login", &self.allows_password_login())
            .finish()
    }
}

/// Compares two byte strings in time that depends only on their lengths.
fn constant_time_equal(left: &[u8], right: &[u8]) -> bool {
    if left.len() != right.len() {
        return false;
    }
    let difference = left
        .iter()
        .zip(right)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    std::hint::black_box(difference) == 0
}

/// Why a stored RabbitMQ password hash could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PasswordHashError {
    /// The `hashing_algorithm` is not one RabbitMQ ships.
    UnknownAlgorithm(String),
    /// The `password_hash` is not valid base64; carries the decoder's explanation.
    InvalidBase64(String),
    /// The decoded hash is not a 4-byte salt followed by the algorithm's digest.
    WrongLength {
        /// The algorithm the hash was declared with.
        algorithm: HashingAlgorithm,
        /// Salt plus digest length for that algorithm.
        expected: usize,
        /// The decoded length.
        actual: usize,
    },
}

impl std::fmt::Display for PasswordHashError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PasswordHashError::UnknownAlgorithm(name) => write!(
                f,
                "unknown hashing algorithm '{name}' (expected one of {}, {} or {})",
                HashingAlgorithm::Sha256,
                HashingAlgorithm::Sha512,
                HashingAlgorithm::Md5
            ),
            PasswordHashError::InvalidBase64(reason) => {
                write!(f, "password hash is not valid base64: {reason}")
            }
            PasswordHashError::WrongLength {
                algorithm,
                expected,
                actual,
            } => write!(
                f,
                "password hash decodes to {actual} bytes, but {algorithm} hashes are {expected} \
                 bytes (4-byte salt plus digest); is hashing_algorithm right?"
            ),
        }
    }
}

impl std::error::Error for PasswordHashError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rabbitmq_documented_sha256_vector_matches() {
        // The worked example in RabbitMQ's "Credentials and Passwords" guide: salt 908DC60A,
        // password "test12".
        let hash =
            PasswordHash::with_salt(HashingAlgorithm::Sha256, [0x90, 0x8D, 0xC6, 0x0A], "test12");
        assert_eq!(
            hash.to_base64(),
            "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR"
        );
        let loaded = PasswordHash::from_rabbit(
            "rabbit_password_hashing_sha256",
            "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR",
        )
        .expect("documented hash loads");
        assert_eq!(loaded, hash);
        assert!(loaded.verify("test12"));
        assert!(!loaded.verify("test13"));
    }

    #[test]
    fn pre_3_6_md5_vector_matches() {
        // The MD5 example from the rabbitmq-discuss thread that first described the layout.
        let loaded = PasswordHash::from_rabbit(
            "rabbit_password_hashing_md5",
            "ytUIm8s3AnKsXQjptplKFytfVxI=",
        )
        .expect("md5 hash loads");
        assert!(loaded.verify("simon"));
        assert!(!loaded.verify("simon "));
        let rebuilt =
            PasswordHash::with_salt(HashingAlgorithm::Md5, [0xCA, 0xD5, 0x08, 0x9B], "simon");
        assert_eq!(rebuilt.to_base64(), "ytUIm8s3AnKsXQjptplKFytfVxI=");
    }

    #[test]
    fn guest_hashes_with_fixed_salt_match_independent_computation() {
        // Computed outside Warren (Python hashlib) from salt 01020304 and password "guest".
        let sha256 = PasswordHash::with_salt(HashingAlgorithm::Sha256, [1, 2, 3, 4], "guest");
        assert_eq!(
            sha256.to_base64(),
            "AQIDBEMMOXwY6PKx/JKP9PAqfsb4ozuD0Ta3pxxa9gEYBMmD"
        );
        let sha512 = PasswordHash::with_salt(HashingAlgorithm::Sha512, [1, 2, 3, 4], "guest");
        assert_eq!(
            sha512.to_base64(),
            "AQIDBANSvkE51MvG7pNDq4NjmP8SFay7rWsolg//30q7jnApCiuE049JxchapptDh7ryvu/VdvUXYHbwdpa9veVAv14="
        );
        for hash in [sha256, sha512] {
            let reloaded =
                PasswordHash::from_rabbit(hash.algorithm.rabbit_name(), &hash.to_base64())
                    .expect("round trip");
            assert!(reloaded.verify("guest"));
            assert!(!reloaded.verify("Guest"));
            assert!(!reloaded.verify(""));
        }
    }

    #[test]
    fn new_uses_sha256_with_a_random_salt() {
        let first = PasswordHash::new("s3cret");
        let second = PasswordHash::new("s3cret");
        assert_eq!(first.algorithm, HashingAlgorithm::Sha256);
        assert_eq!(first.salted_hash.len(), SALT_LENGTH + 32);
        assert!(first.verify("s3cret") && second.verify("s3cret"));
        assert!(!first.verify("secret"));
        // Four random bytes collide once in four billion runs.
        assert_ne!(
            first.salted_hash[..SALT_LENGTH],
            second.salted_hash[..SALT_LENGTH]
        );
    }

    #[test]
    fn every_algorithm_round_trips_through_base64() {
        for algorithm in HashingAlgorithm::ALL {
            let hash = PasswordHash::with_algorithm(algorithm, "pässwörd");
            assert_eq!(
                hash.salted_hash.len(),
                SALT_LENGTH + algorithm.digest_length()
            );
            let reloaded = PasswordHash::from_rabbit(algorithm.rabbit_name(), &hash.to_base64())
                .expect("round trip");
            assert!(reloaded.verify("pässwörd"));
            assert_eq!(
                HashingAlgorithm::from_rabbit_name(algorithm.rabbit_name()),
                Some(algorithm)
            );
        }
    }

    #[test]
    fn empty_hash_is_a_user_without_password_login() {
        let hash = PasswordHash::from_rabbit("rabbit_password_hashing_sha256", "")
            .expect("empty is allowed");
        assert!(!hash.allows_password_login());
        assert!(!hash.verify(""));
        assert!(!hash.verify("guest"));
        assert_eq!(hash.to_base64(), "");
        assert!(!PasswordHash::no_password().verify(""));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert_eq!(
            PasswordHash::from_rabbit("rabbit_password_hashing_sha1", "AAAA"),
            Err(PasswordHashError::UnknownAlgorithm(
                "rabbit_password_hashing_sha1".into()
            ))
        );
        let error = PasswordHash::from_rabbit("rabbit_password_hashing_sha256", "not base64!!")
            .expect_err("garbage base64");
        assert!(
            matches!(error, PasswordHashError::InvalidBase64(_)),
            "{error:?}"
        );
        assert!(error.to_string().contains("not valid base64"), "{error}");
        // Valid base64 of a sha256 hash, declared as sha512.
        let error = PasswordHash::from_rabbit(
            "rabbit_password_hashing_sha512",
            "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR",
        )
        .expect_err("wrong length");
        assert_eq!(
            error.to_string(),
            "password hash decodes to 36 bytes, but rabbit_password_hashing_sha512 hashes are 68 \
             bytes (4-byte salt plus digest); is hashing_algorithm right?"
        );
        assert!(
            PasswordHash::from_rabbit("", "AAAA").is_err(),
            "an empty algorithm name is not silently sha256"
        );
    }

    #[test]
    fn hand_built_short_hash_never_verifies() {
        let hash = PasswordHash {
            algorithm: HashingAlgorithm::Sha256,
            salted_hash: vec![1, 2, 3],
        };
        assert!(!hash.verify(""));
    }

    #[test]
    fn debug_output_does_not_print_the_hash() {
        let hash = PasswordHash::with_salt(HashingAlgorithm::Sha256, [1, 2, 3, 4], "guest");
        let debug = format!("{hash:?}");
        assert!(!debug.contains(&hash.to_base64()), "{debug}");
        assert!(debug.contains("Sha256"), "{debug}");
    }
}
