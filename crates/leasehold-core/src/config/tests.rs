//! The URL parser's tests: every scheme, every refusal, and no password in any message.

use super::*;

fn err(url: &str) -> String {
    let e = Config::parse(url).unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{url}");
    e.to_string()
}

#[test]
fn file_urls() {
    let c = Config::parse("file:///tmp/locks").unwrap();
    assert_eq!(
        c.backend,
        BackendConfig::Local {
            dir: "/tmp/locks".into(),
            single_host: false,
        }
    );
    assert_eq!(c.prefix, DEFAULT_PREFIX);
    assert_eq!(c.pool_size, DEFAULT_POOL_SIZE);
    let c = Config::parse("file://localhost/tmp/a%20b?prefix=x:").unwrap();
    assert_eq!(
        c.backend,
        BackendConfig::Local {
            dir: "/tmp/a b".into(),
            single_host: false,
        }
    );
    assert_eq!(c.prefix, "x:");
    err("file://relative/dir");
    err("file:///");
}

#[test]
fn file_urls_take_single_host() {
    let c = Config::parse("file:///mnt/ntfs/locks?single_host=true&prefix=a:").unwrap();
    assert_eq!(
        c.backend,
        BackendConfig::Local {
            dir: "/mnt/ntfs/locks".into(),
            single_host: true,
        }
    );
    assert_eq!(c.describe(), "file:///mnt/ntfs/locks?single_host=true");
    let c = Config::parse("file:///x?single_host=false").unwrap();
    assert!(matches!(
        c.backend,
        BackendConfig::Local {
            single_host: false,
            ..
        }
    ));
    assert!(err("file:///x?single_host=yes").contains("`true` or `false`"));
    // Unknown parameters stay errors, and name the accepted ones, this one among them.
    let msg = err("file:///x?singlehost=true");
    assert!(msg.contains("singlehost"), "{msg}");
    assert!(msg.contains("single_host"), "{msg}");
    assert!(msg.contains("io_timeout_ms"), "{msg}");
    // It is a file:// parameter only.
    assert!(err("redis://h?single_host=true").contains("single_host"));
}

#[test]
fn redis_urls() {
    let c = Config::parse(
        "redis://user:p%40ss@example.com:6380/3?prefix=app:&connect_timeout_ms=250&io_timeout_ms=500&pool_size=4",
    )
    .unwrap();
    let BackendConfig::Redis { server, tls } = &c.backend else {
        panic!()
    };
    assert!(!tls);
    assert_eq!(server.host, "example.com");
    assert_eq!(server.port, 6380);
    assert_eq!(server.db, 3);
    assert_eq!(server.username.as_deref(), Some("user"));
    assert_eq!(server.password.as_ref().unwrap().expose(), "p@ss");
    assert_eq!(c.connect_timeout, Duration::from_millis(250));
    assert_eq!(c.io_timeout, Duration::from_millis(500));
    assert_eq!(c.pool_size, 4);
    assert!(!format!("{c:?} {c}").contains("p@ss"));

    let c = Config::parse("rediss://:secret@[::1]").unwrap();
    let BackendConfig::Redis { server, tls } = &c.backend else {
        panic!()
    };
    assert!(tls);
    assert_eq!((server.host.as_str(), server.port), ("::1", 6379));
    assert_eq!(server.username, None);
}

#[test]
fn redlock_urls() {
    let c = Config::parse("redlock://:pw@a:1,b:2,c/2").unwrap();
    let BackendConfig::Redlock { servers } = &c.backend else {
        panic!()
    };
    assert_eq!(servers.len(), 3);
    assert!(servers.iter().all(|s| s.db == 2 && s.password.is_some()));
    assert_eq!(servers[2].port, DEFAULT_REDIS_PORT);
    err("redlock://a,b");
    err("redlock://a,a,b");
}

#[test]
fn postgres_urls() {
    let c = Config::parse(
        "postgres://u:pw@localhost:5432/db?lock=table&table=my_locks&sslmode=disable&prefix=p:",
    )
    .unwrap();
    let BackendConfig::Postgres(pg) = &c.backend else {
        panic!()
    };
    assert_eq!(pg.mode, PostgresLockMode::Table);
    assert_eq!(pg.table, "my_locks");
    assert_eq!(pg.connection.expose(), "postgres://u:pw@localhost:5432/db");
    assert_eq!(pg.ssl_mode, PostgresSslMode::Disable);
    assert_eq!(c.prefix, "p:");
    let c = Config::parse("postgresql://localhost/db").unwrap();
    let BackendConfig::Postgres(pg) = &c.backend else {
        panic!()
    };
    assert_eq!(pg.mode, PostgresLockMode::Advisory);
    assert_eq!(pg.table, DEFAULT_TABLE);
    err("postgres://h/db?lock=advisory&table=t");
    err("postgres://h/db?lock=table&table=x;drop");
    err("postgres://h/db?lock=rows");
}

#[test]
fn postgres_pooler() {
    let pooler = |url: &str| match Config::parse(url).unwrap().backend {
        BackendConfig::Postgres(pg) => {
            assert!(
                !pg.connection.expose().contains("pooler"),
                "Leasehold's own, not the driver's"
            );
            pg.pooler
        }
        _ => panic!(),
    };
    assert_eq!(
        pooler("postgres://h/db"),
        None,
        "unset: detected at connect"
    );
    assert_eq!(
        pooler("postgres://h/db?pooler=none"),
        Some(PostgresPooler::None)
    );
    assert_eq!(
        pooler("postgres://h/db?lock=table&pooler=session"),
        Some(PostgresPooler::Session)
    );
    assert_eq!(
        pooler("postgres://h/db?lock=table&pooler=transaction"),
        Some(PostgresPooler::Transaction)
    );
    assert!(err("postgres://h/db?pooler=statement").contains("`pooler` must be"));
    err("redis://h?pooler=none");
}

#[test]
fn postgres_tls_and_password_file() {
    let c = Config::parse(
        "postgres://u@h/db?sslmode=verify-full&sslrootcert=/ca.pem&sslcert=/c.pem&sslkey=/k.pem",
    )
    .unwrap();
    let BackendConfig::Postgres(pg) = &c.backend else {
        panic!()
    };
    assert_eq!(pg.ssl_mode, PostgresSslMode::VerifyFull);
    assert_eq!(
        pg.ssl_root_cert.as_deref(),
        Some(std::path::Path::new("/ca.pem"))
    );
    assert_eq!(pg.ssl_key.as_deref(), Some(std::path::Path::new("/k.pem")));
    assert_eq!(pg.connection.expose(), "postgres://u@h/db");
    let c = Config::parse("postgres://u@h/db").unwrap();
    let BackendConfig::Postgres(pg) = &c.backend else {
        panic!()
    };
    assert_eq!(pg.ssl_mode, PostgresSslMode::Prefer, "libpq's default");
    assert!(err("postgres://h/db?sslmode=verify-full").contains("sslrootcert"));
    assert!(err("postgres://h/db?sslmode=allow").contains("sslmode"));
    assert!(err("postgres://h/db?sslcert=/c.pem").contains("sslkey"));
    err("postgres://h/db?sslmode=disable&sslrootcert=/ca.pem");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pw");
    std::fs::write(&file, "s3cret-file\n").unwrap();
    let url = format!("postgres://u@h/db?password_file={}", file.display());
    let c = Config::parse(&url).unwrap();
    let BackendConfig::Postgres(pg) = &c.backend else {
        panic!()
    };
    assert_eq!(pg.password.as_ref().unwrap().expose(), "s3cret-file");
    assert!(!pg.connection.expose().contains("password_file"));
    assert!(c.secrets().contains(&"s3cret-file".to_owned()));
    assert!(!format!("{c:?}").contains("s3cret-file"));
    let e = err(&format!(
        "postgres://u:inurl@h/db?password_file={}",
        file.display()
    ));
    assert!(e.contains("password_file") && !e.contains("inurl"));
    assert!(err("postgres://h/db?password_file=/no/such/file").contains("password_file"));
}

#[test]
fn bad_urls_are_clear_and_never_leak_passwords() {
    assert!(err("").contains("empty"));
    assert!(err("not a url").contains("not a backend URL"));
    assert!(err("mongodb://h/db").contains("unknown URL scheme"));
    let e = err("redis://h?bogus=1");
    assert!(e.contains("`bogus`") && e.contains("prefix, connect_timeout_ms"));
    err("redis://h:0");
    err("redis://h:99999");
    err("redis://h/x");
    err("redis://h?pool_size=0");
    err("redis://h?io_timeout_ms=-1");
    err("redis://h?prefix=a&prefix=b");
    for url in [
        "redis://user:Sup3rS3cret@h:notaport",
        "redis://:Sup3rS3cret/x@h:bad",
        "redlock://:Sup3rS3cret@a,b",
        "postgres://u:Sup3rS3cret@h/db?wat=1",
        "redis://:Sup3rS3cret@h?pool_size=Sup3rS3cret",
    ] {
        let e = err(url);
        assert!(!e.contains("Sup3rS3cret"), "{url} -> {e}");
    }
}

#[test]
fn topology_urls() {
    let c = Config::parse("redis+cluster://:pw@a:7000,b:7001,c").unwrap();
    let BackendConfig::RedisCluster { seeds } = &c.backend else {
        panic!()
    };
    assert_eq!(seeds.len(), 3);
    assert!(seeds
        .iter()
        .all(|s| s.password.as_ref().unwrap().expose() == "pw"));
    assert_eq!(seeds[2].port, DEFAULT_REDIS_PORT);
    assert!(c.redis.tls.is_none());
    assert_eq!(c.describe(), "redis+cluster://a:7000,b:7001,c:6379");
    err("redis+cluster://a,b/1");
    err("redis+cluster://a,a");

    let c = Config::parse(
        "rediss+sentinel://u:mpw@s1,s2:5000/mymaster/2?sentinel_user=su&sentinel_password=spw&tls_ca_file=/ca.pem",
    )
    .unwrap();
    let BackendConfig::RedisSentinel {
        sentinels,
        service,
        master,
    } = &c.backend
    else {
        panic!()
    };
    assert_eq!(service, "mymaster");
    assert_eq!(master.db, 2);
    assert_eq!(master.username.as_deref(), Some("u"));
    assert_eq!(master.password.as_ref().unwrap().expose(), "mpw");
    assert_eq!(sentinels[0].port, DEFAULT_SENTINEL_PORT);
    assert_eq!(sentinels[1].port, 5000);
    assert!(sentinels
        .iter()
        .all(|s| s.username.as_deref() == Some("su")
            && s.password.as_ref().unwrap().expose() == "spw"));
    let tls = c.redis.tls.as_ref().unwrap();
    assert_eq!(
        tls.ca_file.as_deref(),
        Some(std::path::Path::new("/ca.pem"))
    );
    let mut secrets = c.secrets();
    secrets.sort();
    secrets.dedup();
    assert_eq!(secrets, ["mpw", "spw"]);
    assert!(!format!("{c:?} {c}").contains("spw"));
    err("redis+sentinel://s1,s2");
    err("redis+sentinel://s1/");
    err("redis+sentinel://s1/m?tls_ca_file=/x");

    let c = Config::parse("redis+unix:///run/redis.sock?db=3&replicas=1").unwrap();
    let BackendConfig::RedisUnix { path, server } = &c.backend else {
        panic!()
    };
    assert_eq!(path, std::path::Path::new("/run/redis.sock"));
    assert_eq!(server.db, 3);
    assert_eq!(c.redis.replicas, 1);
    assert_eq!(c.redis.replicas_timeout, c.io_timeout);
    let c = Config::parse("redis+unix://:pw@/run/redis.sock").unwrap();
    assert_eq!(c.secrets(), ["pw"]);
    err("redis+unix://relative.sock");

    let c = Config::parse("redlocks://a,b,c?tls_insecure=true").unwrap();
    assert!(c.redis.tls.as_ref().unwrap().insecure);
    assert_eq!(c.describe(), "redlocks://a:6379,b:6379,c:6379");
    err("redlock://a,b,c?tls_insecure=true");
    err("rediss://h?tls_cert_file=/c.pem");
    err("rediss://h?tls_insecure=yes");
    err("redis://h?replicas=65");
    err("redis://h?replicas_timeout_ms=5");
    let c = Config::parse("redis://h?replicas=2&replicas_timeout_ms=50").unwrap();
    assert_eq!(c.redis.replicas_timeout, Duration::from_millis(50));
    err("postgres://h/db?replicas=1");
}

#[test]
fn every_redis_scheme_takes_allow_eviction() {
    for url in [
        "redis://h",
        "rediss://h",
        "redis+unix:///run/redis.sock",
        "redis+cluster://a,b",
        "rediss+cluster://a,b",
        "redis+sentinel://s1/m",
        "rediss+sentinel://s1/m",
        "redlock://a,b,c",
        "redlocks://a,b,c",
        "valkey://h",
        "valkeys+cluster://a,b",
        "valkey+sentinel://s1/m",
    ] {
        assert!(!Config::parse(url).unwrap().redis.allow_eviction, "{url}");
        let sep = if url.contains('?') { '&' } else { '?' };
        let on = format!("{url}{sep}allow_eviction=true");
        assert!(Config::parse(&on).unwrap().redis.allow_eviction, "{on}");
        let off = format!("{url}{sep}allow_eviction=false");
        assert!(!Config::parse(&off).unwrap().redis.allow_eviction, "{off}");
        let e = err(&format!("{url}{sep}allow_eviction=yes"));
        assert!(e.contains("`true` or `false`"), "{e}");
    }
    // Named among the accepted parameters when a Redis URL has an unknown one...
    let e = err("redis://h?allow_evictions=true");
    assert!(
        e.contains("allow_eviction,") || e.ends_with("allow_eviction"),
        "{e}"
    );
    // ...and a Redis parameter only.
    let e = err("postgres://h/db?allow_eviction=true");
    assert!(e.contains("allow_eviction"), "{e}");
    err("file:///x?allow_eviction=true");
}

#[test]
fn password_files() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pw");
    std::fs::write(&file, "S3cretFromFile\n").unwrap();
    let url = format!("redlock://a,b,c?password_file={}", file.display());
    let c = Config::parse(&url).unwrap();
    let BackendConfig::Redlock { servers } = &c.backend else {
        panic!()
    };
    assert!(servers
        .iter()
        .all(|s| s.password.as_ref().unwrap().expose() == "S3cretFromFile"));
    assert!(!format!("{c:?} {c}").contains("S3cretFromFile"));
    let e = err(&format!(
        "redis://:inurl@h?password_file={}",
        file.display()
    ));
    assert!(e.contains("one of them"), "{e}");
    let e = err("redis://h?password_file=/no/such/file");
    assert!(e.contains("/no/such/file"), "{e}");
    std::fs::write(&file, "").unwrap();
    err(&format!("redis://h?password_file={}", file.display()));
    let sentinel = dir.path().join("spw");
    std::fs::write(&sentinel, "SentinelS3cret\r\n").unwrap();
    let c = Config::parse(&format!(
        "redis+sentinel://s1/m?sentinel_password_file={}",
        sentinel.display()
    ))
    .unwrap();
    assert_eq!(c.secrets(), ["SentinelS3cret"]);
}

#[test]
fn valkey_schemes_are_the_redis_schemes() {
    for (valkey, redis) in [
        ("valkey://h:6380/2?prefix=p:", "redis://h:6380/2?prefix=p:"),
        (
            "valkeys://h?tls_insecure=true",
            "rediss://h?tls_insecure=true",
        ),
        (
            "valkey+unix:///run/valkey.sock",
            "redis+unix:///run/valkey.sock",
        ),
        ("valkey+cluster://a,b:7001", "redis+cluster://a,b:7001"),
        ("valkeys+cluster://a,b:7001", "rediss+cluster://a,b:7001"),
        (
            "valkey+sentinel://s1,s2/main",
            "redis+sentinel://s1,s2/main",
        ),
        (
            "valkeys+sentinel://s1,s2/main",
            "rediss+sentinel://s1,s2/main",
        ),
        ("VALKEY://h", "redis://h"),
    ] {
        let a = Config::parse(valkey).unwrap_or_else(|e| panic!("{valkey}: {e}"));
        let b = Config::parse(redis).unwrap();
        assert_eq!(a.backend, b.backend, "{valkey}");
        assert_eq!(a.prefix, b.prefix, "{valkey}");
    }
    // Only the listed forms: no Valkey Redlock scheme (`redlock://` names Redis masters of any make).
    assert!(err("valkeylock://a,b,c").contains("valkey"));
    assert!(err("valkey+foo://h").contains("valkey+foo"));
}

#[test]
fn mysql_urls() {
    let c = Config::parse(
        "mysql://app:s3cr%40t@db.example:3307/locks?lock=table&table=my_locks&prefix=p:&pool_size=4",
    )
    .unwrap();
    let BackendConfig::Mysql(my) = &c.backend else {
        panic!("{c:?}")
    };
    assert_eq!(my.mode, MysqlLockMode::Table);
    assert_eq!(my.table, "my_locks");
    assert_eq!((my.host.as_str(), my.port), ("db.example", 3307));
    assert_eq!(my.user.as_deref(), Some("app"));
    assert_eq!(my.password.as_ref().map(|p| p.expose()), Some("s3cr@t"));
    assert_eq!(my.database.as_deref(), Some("locks"));
    assert_eq!(my.ssl_mode, MysqlSslMode::Disabled);
    assert_eq!((c.prefix.as_str(), c.pool_size), ("p:", 4));
    assert!(!format!("{c:?} {c}").contains("s3cr"), "{c:?}");

    let c = Config::parse("mariadb://[::1]/db").unwrap();
    let BackendConfig::Mysql(my) = &c.backend else {
        panic!("{c:?}")
    };
    assert_eq!(my.mode, MysqlLockMode::Named);
    assert_eq!((my.host.as_str(), my.port), ("::1", DEFAULT_MYSQL_PORT));
    assert_eq!(my.table, DEFAULT_MYSQL_TABLE);
    assert!(my.password.is_none());

    let c = Config::parse("mysql://h/db?ssl-mode=required&ssl-ca=/ca.pem").unwrap();
    let BackendConfig::Mysql(my) = &c.backend else {
        panic!("{c:?}")
    };
    assert_eq!(
        my.ssl_mode,
        MysqlSslMode::VerifyCa,
        "REQUIRED with a CA checks it"
    );
    let c = Config::parse(
        "mysql://h/db?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem&ssl-cert=/c.pem&ssl-key=/k.pem",
    )
    .unwrap();
    let BackendConfig::Mysql(my) = &c.backend else {
        panic!("{c:?}")
    };
    assert_eq!(my.ssl_mode, MysqlSslMode::VerifyIdentity);

    assert!(err("mysql://h/db?lock=advisory").contains("named"));
    assert!(err("mysql://h/db?sslmode=require").contains("ssl-mode"));
    err("mysql://h/db?ssl-mode=VERIFY_CA");
    err("mysql://h/db?ssl-mode=PREFERRED");
    err("mysql://h/db?ssl-cert=/c.pem&ssl-mode=REQUIRED");
    err("mysql://h/db?ssl-mode=DISABLED&ssl-ca=/ca.pem");
    err("mysql://h/db?table=bad-name");
    err("mysql://h:0/db");
    err("mysql://h/a/b");
    let e = err("mysql://u:hunter2@h:99999/db");
    assert!(!e.contains("hunter2"), "{e}");
    let e = err("mysql://u:hunter2@h/db?password_file=/nonexistent");
    assert!(!e.contains("hunter2"), "{e}");
    let e = err("mysql://u:hunter2@h/db?nope=1");
    assert!(e.contains("ssl-mode") && !e.contains("hunter2"), "{e}");
}

#[test]
fn mysql_password_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pw");
    std::fs::write(&file, "from-file\n").unwrap();
    let c = Config::parse(&format!("mysql://u@h/db?password_file={}", file.display())).unwrap();
    let BackendConfig::Mysql(my) = &c.backend else {
        panic!("{c:?}")
    };
    assert_eq!(my.password.as_ref().map(|p| p.expose()), Some("from-file"));
    assert_eq!(c.secrets(), vec!["from-file".to_owned()]);
}

#[test]
fn lock_delay_is_a_common_parameter() {
    assert_eq!(
        Config::parse("file:///tmp/l").unwrap().lock_delay,
        Duration::ZERO
    );
    for (url, ms) in [
        ("file:///tmp/l?lock_delay_ms=0", 0),
        ("redis://h?lock_delay_ms=15000", 15_000),
        ("postgres://u@h/db?lock_delay_ms=1", 1),
        ("mysql://u@h/db?lock=table&lock_delay_ms=600000", 600_000),
    ] {
        assert_eq!(
            Config::parse(url).unwrap().lock_delay,
            Duration::from_millis(ms),
            "{url}"
        );
    }
    for bad in ["-1", "1.5", "abc", "600001", ""] {
        let e = err(&format!("redis://h?lock_delay_ms={bad}"));
        assert!(e.contains("lock_delay_ms"), "{bad}: {e}");
    }
}

/// Every configuration type derives `Debug`: formatting one, of every scheme, with passwords in every
/// place a URL can hold one, must show none of them.
#[test]
fn no_configuration_formats_a_password() {
    let urls = [
        "redis://:Pw-1-redis@127.0.0.1:1",
        "rediss://user:Pw-1-redis@127.0.0.1:1",
        "redlock://:Pw-1-redis@10.0.0.1:1,10.0.0.2:2,10.0.0.3:3",
        "redis+cluster://u:Pw-1-redis@127.0.0.1:1,127.0.0.1:2",
        "redis+sentinel://:Pw-1-redis@127.0.0.1:1/svc?sentinel_password=Pw-2-sentinel",
        "postgres://u:Pw-1-pg@127.0.0.1:1/db",
        "postgres://u:Pw%2D1%2Dpg@127.0.0.1:1/db?lock=table",
        "postgresql://127.0.0.1:1/db?user=u&password=Pw-1-pg",
        "mysql://u:Pw-1-my@127.0.0.1:1/db",
        "mariadb://u:Pw-1-my@127.0.0.1:1/db?lock=table",
    ];
    for url in urls {
        let config = Config::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert!(!config.secrets().is_empty(), "{url}: no secret found");
        let shown = format!("{config:?} {:?}", config.backend);
        for secret in config.secrets() {
            assert!(
                !shown.contains(&secret),
                "{url} formats a password: {shown}"
            );
        }
        assert!(!shown.contains("Pw-"), "{url} formats a password: {shown}");
    }
}
