//! The lock key and its companions, all in the lock key's Redis Cluster hash slot.

use std::sync::{Arc, OnceLock};

use crate::net::{hash_tag, key_slot};

use crate::wire::{Decimal, array, bulk};

/// Companion keys are derived from the lock name so that a script touching all of them never
/// crosses a cluster slot.
#[derive(Clone, Debug)]
pub struct Keys {
    /// Exactly the name the user gave.
    pub lock: Vec<u8>,
    /// The fence counter (never expires; one small key per name).
    pub fence: Vec<u8>,
    /// The wake-up list that a release pushes one element onto.
    pub wake: Vec<u8>,
    /// The waiters' announcements: a sorted set of waiter ids by when each announcement
    /// ends (server time, ms); it expires with the last of them.
    pub waiters: Vec<u8>,
    /// The read holds of a read-write lock: a sorted set of tokens by expiry (server time, ms).
    pub readers: Vec<u8>,
    /// Which of the announced waiters are readers (the same ids and scores as in `waiters`):
    /// the others are writers, which new readers queue behind.
    pub readq: Vec<u8>,
    /// The permits held of a semaphore: a sorted set of tokens by expiry (server time, ms).
    pub holders: Vec<u8>,
    /// A semaphore's permit count while any permit is held.
    pub permits: Vec<u8>,
    /// The mutex's acquire (of a caller that waits, and of one that does not) and release
    /// scripts' keys, and a `try_lock`'s plain commands, packed on first use.
    acquire_keys: OnceLock<PackedKeys>,
    try_acquire_keys: OnceLock<PackedKeys>,
    release_keys: OnceLock<PackedKeys>,
    plain: OnceLock<PlainPacked>,
}

/// A `try_lock`'s plain commands (see `proto/plain.rs`) as far as one lock name makes them:
/// the start of its `SET` (the token and the TTL follow), and the commands after it, whole.
#[derive(Clone, Debug)]
pub(crate) struct PlainPacked {
    /// `SET lock`, in an array header for the six words of `SET lock token NX PX ttl`.
    pub(crate) set: Vec<u8>,
    /// `GET lock`, `EXISTS readers`: shared by every round's requests.
    pub(crate) after: [Arc<[u8]>; 2],
    /// The keys' cluster slot.
    pub(crate) slot: Option<u16>,
}

/// A script call's keys packed in RESP once, with their count and slot: what the calls of one
/// lock name have in common (a call packs only its arguments).
#[derive(Clone, Debug)]
pub(crate) struct PackedKeys {
    /// `numkeys`, then the keys.
    pub(crate) packed: Vec<u8>,
    pub(crate) count: usize,
    /// The first key's cluster slot.
    pub(crate) slot: Option<u16>,
}

impl PackedKeys {
    pub(crate) fn new(keys: &[&[u8]]) -> PackedKeys {
        let mut packed = Vec::with_capacity(8 + keys.iter().map(|k| k.len() + 16).sum::<usize>());
        let slot = PackedKeys::pack(&mut packed, keys);
        PackedKeys {
            packed,
            count: keys.len(),
            slot,
        }
    }

    /// Appends `numkeys` and the keys to `buf`; returns the first key's slot.
    pub(crate) fn pack(buf: &mut Vec<u8>, keys: &[&[u8]]) -> Option<u16> {
        bulk(buf, &Decimal::new(keys.len() as u64));
        for k in keys {
            bulk(buf, k);
        }
        keys.first().map(|k| key_slot(k))
    }
}

impl Keys {
    /// The keys of a lock name; for a name no lock may have (empty or too long, refused before
    /// any use), only the name, without deriving companions from it.
    pub(crate) fn for_name(name: Vec<u8>) -> Keys {
        if name.is_empty() || name.len() > crate::MAX_NAME_LEN {
            return Keys {
                lock: name,
                fence: Vec::new(),
                wake: Vec::new(),
                waiters: Vec::new(),
                readers: Vec::new(),
                readq: Vec::new(),
                holders: Vec::new(),
                permits: Vec::new(),
                acquire_keys: Default::default(),
                try_acquire_keys: Default::default(),
                release_keys: Default::default(),
                plain: Default::default(),
            };
        }
        Keys::new(&name)
    }

    /// The keys of a semaphore name: its waiters and wake-up list are its own, apart from
    /// those of a mutex on the same name (the fence counter is shared: still one strictly
    /// increasing sequence per name).
    pub fn for_semaphore(name: Vec<u8>) -> Keys {
        let mut keys = Keys::for_name(name);
        if !keys.fence.is_empty() {
            let prefix = companion_prefix(&keys.lock);
            let with = |suffix: &str| [&prefix[..], suffix.as_bytes()].concat();
            keys.wake = with(SEM_WAKE);
            keys.waiters = with(SEM_WAITQ);
        }
        keys
    }

    /// The keys of the mutex (and read-write lock) `name`.
    pub fn new(name: &[u8]) -> Keys {
        let prefix = companion_prefix(name);
        let with = |suffix: &str| {
            let mut k = prefix.clone();
            k.extend_from_slice(suffix.as_bytes());
            k
        };
        Keys {
            lock: name.to_vec(),
            fence: with(FENCE),
            wake: with(WAKE),
            // Not `:waiters`, the string key of earlier versions: an old and a new client on
            // one name must not meet a key of the other type.
            waiters: with(WAITQ),
            readers: with(READERS),
            readq: with(READQ),
            holders: with(HOLDERS),
            permits: with(PERMITS),
            acquire_keys: Default::default(),
            try_acquire_keys: Default::default(),
            release_keys: Default::default(),
            plain: Default::default(),
        }
    }

    /// The mutex acquire script's keys: lock, fence, readers, waiters.
    pub(crate) fn acquire_keys(&self) -> &PackedKeys {
        self.acquire_keys.get_or_init(|| {
            PackedKeys::new(&[&self.lock, &self.fence, &self.readers, &self.waiters])
        })
    }

    /// The mutex acquire script's keys for a caller that has not waited and will not wait:
    /// lock, fence, readers (no waiters: it neither announces itself nor takes an
    /// announcement back).
    pub(crate) fn try_acquire_keys(&self) -> &PackedKeys {
        self.try_acquire_keys
            .get_or_init(|| PackedKeys::new(&[&self.lock, &self.fence, &self.readers]))
    }

    /// A `try_lock`'s plain commands, packed once.
    pub(crate) fn plain(&self) -> &PlainPacked {
        self.plain.get_or_init(|| {
            let command = |words: &[&[u8]]| -> Vec<u8> {
                let mut packed = Vec::new();
                array(&mut packed, words.len());
                for w in words {
                    bulk(&mut packed, w);
                }
                packed
            };
            let mut set = Vec::new();
            array(&mut set, 6);
            bulk(&mut set, b"SET");
            bulk(&mut set, &self.lock);
            PlainPacked {
                set,
                after: [
                    command(&[b"GET", &self.lock]).into(),
                    command(&[b"EXISTS", &self.readers]).into(),
                ],
                slot: Some(key_slot(&self.lock)),
            }
        })
    }

    /// The mutex release script's keys: lock, wake, waiters.
    pub(crate) fn release_keys(&self) -> &PackedKeys {
        self.release_keys
            .get_or_init(|| PackedKeys::new(&[&self.lock, &self.wake, &self.waiters]))
    }
}

/// The endings of companion keys after their prefix (see [`companion_prefix`]): what
/// [`Keys::new`] and [`Keys::for_semaphore`] make them with, and what
/// [`Keys::name_of_companion`] recognises them by.
const FENCE: &str = ":fence";
const WAKE: &str = ":wake";
const WAITQ: &str = ":waitq";
const READERS: &str = ":readers";
const READQ: &str = ":readq";
const HOLDERS: &str = ":holders";
const PERMITS: &str = ":permits";
const SEM_WAKE: &str = ":semwake";
const SEM_WAITQ: &str = ":semwaitq";
const COMPANIONS: [&str; 9] = [
    FENCE, WAKE, WAITQ, READERS, READQ, HOLDERS, PERMITS, SEM_WAKE, SEM_WAITQ,
];

impl Keys {
    /// The lock name that `key` is a companion key of, or `None` for any other key: the
    /// name whose companion prefix (see [`companion_prefix`]) is what comes before the
    /// ending, checked by deriving the prefix again.
    pub(crate) fn name_of_companion(key: &[u8]) -> Option<Vec<u8>> {
        let ending = COMPANIONS.iter().find(|c| key.ends_with(c.as_bytes()))?;
        let prefix = &key[..key.len() - ending.len()];
        let wrapped = prefix.strip_prefix(b"{").and_then(|p| p.strip_suffix(b"}"));
        let after_tag = prefix
            .windows(2)
            .position(|w| w == b"}:")
            .map(|at| &prefix[at + 2..]);
        // `{x}:fence` is also the fence of the name `{x}` (its own hash tag makes it its
        // prefix): the plain name `x` is read first, as the likelier.
        [wrapped, after_tag, Some(prefix)]
            .into_iter()
            .flatten()
            .find(|name| {
                !name.is_empty()
                    && name.len() <= crate::MAX_NAME_LEN
                    && companion_prefix(name) == prefix
            })
            .map(<[u8]>::to_vec)
    }
}

/// The part that companion keys start with: the name itself when it already has a hash tag,
/// `{name}` when wrapping it makes the name the tag, and otherwise a short tag chosen to land
/// in the same slot (a name with a stray `}` but no valid tag).
fn companion_prefix(name: &[u8]) -> Vec<u8> {
    if hash_tag(name).is_some() {
        return name.to_vec();
    }
    if !name.contains(&b'}') {
        let mut p = Vec::with_capacity(name.len() + 2);
        p.push(b'{');
        p.extend_from_slice(name);
        p.push(b'}');
        return p;
    }
    let slot = key_slot(name);
    let tag = (0u32..)
        .map(|i| format!("{i:x}"))
        .find(|t| key_slot(t.as_bytes()) == slot)
        .unwrap_or_default();
    let mut p = format!("{{{tag}}}").into_bytes();
    p.push(b':');
    p.extend_from_slice(name);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn companions_share_the_lock_slot() {
        let names: [&[u8]; 8] = [
            b"invoice:nightly:lock",
            b"{tenant}:lock",
            b"a{}b",
            b"a}b",
            b"}{",
            b"x{y",
            b"\x00\xff{}}",
            b"report:lock",
        ];
        for name in names {
            let k = Keys::new(name);
            assert_eq!(k.lock, name);
            let slot = key_slot(name);
            for c in [
                &k.fence, &k.wake, &k.waiters, &k.readers, &k.readq, &k.holders, &k.permits,
            ] {
                assert_eq!(key_slot(c), slot, "{:?} vs {:?}", c, name);
                assert_ne!(c, &k.lock);
            }
        }
        assert_eq!(Keys::new(b"job").fence, b"{job}:fence");
        for name in names {
            let k = Keys::for_semaphore(name.to_vec());
            let m = Keys::new(name);
            assert_eq!(k.fence, m.fence, "one fence sequence per name");
            for c in [&k.wake, &k.waiters] {
                assert_eq!(key_slot(c), key_slot(name));
                assert!(![&m.wake, &m.waiters].contains(&c));
            }
        }
        assert!(Keys::for_semaphore(Vec::new()).wake.is_empty());
        for name in names {
            let (k, s) = (Keys::new(name), Keys::for_semaphore(name.to_vec()));
            for c in [
                &k.fence, &k.wake, &k.waiters, &k.readers, &k.readq, &k.holders, &k.permits,
                &s.wake, &s.waiters,
            ] {
                assert_eq!(Keys::name_of_companion(c).as_deref(), Some(name), "{c:?}");
            }
            assert_eq!(Keys::name_of_companion(name), None, "{name:?}");
        }
        for other in [
            &b"{job}"[..],
            b"job:fence:x",
            b"{}:fence",
            b":fence",
            b"x:fence",
        ] {
            assert_eq!(Keys::name_of_companion(other), None, "{other:?}");
        }
    }
}
