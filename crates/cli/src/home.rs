//! Where haul keeps its keys and trust files: `$HAUL_HOME`, else
//! `$XDG_CONFIG_HOME/haul`, else `~/.config/haul`.

use std::path::PathBuf;

pub fn dir() -> PathBuf {
    if let Some(h) = std::env::var_os("HAUL_HOME") {
        return PathBuf::from(h);
    }
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME") {
        return PathBuf::from(x).join("haul");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".config").join("haul")
}

pub fn identity() -> PathBuf {
    dir().join("id_x25519")
}

pub fn known_hosts() -> PathBuf {
    dir().join("known_hosts")
}

pub fn server_key() -> PathBuf {
    dir().join("server_x25519")
}

pub fn authorized_keys() -> PathBuf {
    dir().join("authorized_keys")
}

pub fn comment() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    format!("{user}@{host}")
}
