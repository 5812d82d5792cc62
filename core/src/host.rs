//! This host's name (the pod's name on Kubernetes): the relay's default `instance_id`, the
//! consumer's default name. One lookup, so both name a process the same way.

/// `$HOSTNAME`, else the kernel's host name, else `/etc/hostname`; `None` if all are empty.
pub fn name() -> Option<String> {
    let env = std::env::var("HOSTNAME").ok();
    let file = |path: &str| std::fs::read_to_string(path).ok();
    [
        env,
        file("/proc/sys/kernel/hostname"),
        file("/etc/hostname"),
    ]
    .into_iter()
    .flatten()
    .map(|name| name.trim().to_string())
    .find(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_linux_host_has_a_name() {
        let name = super::name().expect("a host name");
        assert_eq!(name, name.trim());
        assert!(!name.is_empty());
    }
}
