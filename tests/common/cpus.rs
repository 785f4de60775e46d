//! The CPUs a thread may run on, as `/proc` lists them: for the tests of PEs' bindings.

/// The `Cpus_allowed_list` of the thread or process whose `status` file is `path`
/// (`/proc/self/status`: this process's main thread); empty where it cannot be read.
pub fn allowed_list(path: &str) -> String {
    let status = std::fs::read_to_string(path).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// The CPUs of a `Cpus_allowed_list` (`0-3,8`), in order.
pub fn cpu_list(list: &str) -> Vec<usize> {
    list.split(',')
        .filter_map(|part| match part.split_once('-') {
            Some((a, b)) => Some(a.parse().ok()?..=b.parse().ok()?),
            None => part.parse().ok().map(|c| c..=c),
        })
        .flatten()
        .collect()
}
