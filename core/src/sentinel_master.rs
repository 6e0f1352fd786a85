//! The master a Sentinel group watches, as a client is told about it.

use redis::RedisConnectionInfo;

/// The master a Sentinel group watches, for [`ClientBuilder::sentinel`](crate::ClientBuilder::sentinel): its name, and the
/// credentials and database to use on it (none and 0 unless set).
#[derive(Clone)]
pub struct SentinelMaster {
    pub(crate) name: String,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: i64,
}

impl SentinelMaster {
    /// The master the sentinels know as `name`.
    pub fn new(name: impl Into<String>) -> SentinelMaster {
        SentinelMaster {
            name: name.into(),
            username: None,
            password: None,
            db: 0,
        }
    }

    /// The ACL user to authenticate as on the master.
    pub fn username(mut self, username: impl Into<String>) -> SentinelMaster {
        self.username = Some(username.into());
        self
    }

    /// The master's password (`requirepass`, or the ACL user's).
    pub fn password(mut self, password: impl Into<String>) -> SentinelMaster {
        self.password = Some(password.into());
        self
    }

    /// The database to use on the master.
    pub fn db(mut self, db: i64) -> SentinelMaster {
        self.db = db;
        self
    }

    /// The master's credentials and database, as the transport takes them.
    pub(crate) fn settings(&self) -> RedisConnectionInfo {
        let mut settings = RedisConnectionInfo::default().set_db(self.db);
        if let Some(u) = &self.username {
            settings = settings.set_username(u);
        }
        if let Some(p) = &self.password {
            settings = settings.set_password(p);
        }
        settings
    }
}

impl From<&str> for SentinelMaster {
    fn from(name: &str) -> SentinelMaster {
        SentinelMaster::new(name)
    }
}

impl From<String> for SentinelMaster {
    fn from(name: String) -> SentinelMaster {
        SentinelMaster::new(name)
    }
}

impl std::fmt::Debug for SentinelMaster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelMaster")
            .field("name", &self.name)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("db", &self.db)
            .finish()
    }
}
