//! Parsing a cluster URL into its seeds and settings.

use super::*;

fn setup() -> Setup {
    Setup {
        client_name: "t".into(),
        connect_timeout: Duration::from_secs(1),
        preload: Arc::new([]),
        probe: None,
    }
}

fn parse(url: &str) -> Result<Cluster, String> {
    Cluster::parse(url, None, setup())
}

#[test]
fn parses_the_documented_forms() {
    let c = parse("redis+cluster://h1:7000,h2,[::1]:7002").unwrap();
    assert_eq!(
        c.seeds,
        vec![
            ("h1".to_owned(), 7000),
            ("h2".to_owned(), 6379),
            ("::1".to_owned(), 7002)
        ]
    );
    assert_eq!(c.display(), "redis+cluster://h1:7000,h2:6379,[::1]:7002");

    let c = parse("REDIS+CLUSTER://alice:p%40ss@h:1/").unwrap();
    assert_eq!(c.settings.username(), Some("alice"));
    assert_eq!(c.settings.password(), Some("p@ss"));
    assert_eq!(c.display(), "redis+cluster://alice@h:1");

    let c = Cluster::from_seeds(
        &["redis://:pw@h1:7000".into(), "redis://:pw@h2:7001".into()],
        None,
        setup(),
    )
    .unwrap();
    assert_eq!(c.settings.password(), Some("pw"));
    assert_eq!(c.display(), "redis+cluster://h1:7000,h2:7001");

    let c = parse("rediss+cluster://h1:7000,h2:7001#insecure").unwrap();
    assert_eq!(c.display(), "rediss+cluster://h1:7000,h2:7001");
    #[cfg(feature = "tls-rustls")]
    {
        let seeds = ["rediss://h1:7000".into(), "rediss://h2:7001".into()];
        let c = Cluster::from_seeds(&seeds, None, setup()).unwrap();
        assert_eq!(c.display(), "rediss+cluster://h1:7000,h2:7001");
    }
}

#[test]
fn rejects_malformed_urls() {
    for url in [
        "redis+cluster://",
        "redis+cluster://h1,,h2",
        "redis+cluster://h:0",
        "redis+cluster://h:x",
        "redis+cluster://h/0",
        "redis+cluster://h?password=x",
        "redis+cluster://h#frag",
        "redis+cluster://:p%zz@h",
        "rediss+cluster://h#verify",
        "redis+cluster://h#insecure",
    ] {
        assert!(parse(url).is_err(), "{url}");
    }
    for seeds in [
        vec![],
        vec!["redis://h:1/2".to_owned()],
        vec!["unix:///tmp/x.sock".to_owned()],
        vec!["redis://:a@h:1".to_owned(), "redis://:b@h:2".to_owned()],
        vec!["nonsense".to_owned()],
        vec!["redis://h:1".to_owned(), "rediss://h:2".to_owned()],
    ] {
        assert!(
            Cluster::from_seeds(&seeds, None, setup()).is_err(),
            "{seeds:?}"
        );
    }
    // A CA goes with TLS only.
    assert!(Cluster::parse("redis+cluster://h", Some(b"pem"), setup()).is_err());
}
