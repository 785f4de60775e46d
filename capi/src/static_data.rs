//! A C program's static data (its `.data` and `.bss`: globals and `static` variables) made
//! symmetric, as OpenSHMEM requires: at `shmem_init` every PE allocates a part of the
//! symmetric heap as large as the program's writable data, copies that data in, and maps
//! the heap's bytes over it, so that a global's address names heap bytes that every PE's
//! operations reach (`shmem_int_p(&counter, …)` on a `static int counter`).
//!
//! The range is the executable's writable mappings (file-backed, then the anonymous `.bss`
//! after it) as `/proc/self/maps` lists them. Skipped, with a log line, where it cannot be
//! done safely: when this library is linked statically into the executable (its own
//! statics would move under its running threads), or when `FERROSHMEM_SYMMETRIC_DATA=0`.
//! Every PE must run the same executable (the allocation is collective and checked).

use ferroshmem_actors::Pe;
use ferroshmem_runtime::{Error, Result, SymBuffer};

use crate::raw;

/// The program's static data and the heap part now behind it.
#[derive(Debug)]
pub(crate) struct StaticData {
    /// The first address of the data.
    pub start: usize,
    /// Its length in bytes (whole pages).
    pub len: usize,
    /// The heap allocation behind it.
    pub buffer: SymBuffer<u8>,
}

/// The executable's writable data range `[start, end)` in `maps` (`/proc/self/maps`'s text),
/// `exe` being the executable's path.
pub(crate) fn writable_range(maps: &str, exe: &str) -> Option<(usize, usize)> {
    let mut range: Option<(usize, usize)> = None;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(span), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let path = fields.nth(3).unwrap_or("");
        let Some((start, end)) = span.split_once('-').and_then(|(s, e)| {
            Some((
                usize::from_str_radix(s, 16).ok()?,
                usize::from_str_radix(e, 16).ok()?,
            ))
        }) else {
            continue;
        };
        let writable = perms.starts_with("rw");
        match range {
            None if writable && path == exe => range = Some((start, end)),
            Some((s, e)) if writable && start == e && (path.is_empty() || path == exe) => {
                range = Some((s, end))
            }
            Some(_) => break,
            None => {}
        }
    }
    range
}

/// Makes the executable's static data symmetric (see the module's docs); `None` where it
/// is skipped. Collective.
///
/// # Errors
/// The allocation's (a PE running another executable: a mismatch; a heap too small for
/// the data), the mapping's.
pub(crate) async fn make_symmetric(pe: &Pe, own_static: usize) -> Result<Option<StaticData>> {
    if std::env::var("FERROSHMEM_SYMMETRIC_DATA").is_ok_and(|v| v == "0") {
        tracing::info!("static data left private: FERROSHMEM_SYMMETRIC_DATA=0");
        return Ok(None);
    }
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| Error::os("reading /proc/self/maps", e))?;
    let exe = std::env::current_exe().map_err(|e| Error::os("finding the executable", e))?;
    let found = writable_range(&maps, &exe.to_string_lossy());
    // Every PE takes part in the allocation, with 0 bytes where it found nothing.
    let (start, len) = match found {
        Some((s, e)) if !(s..e).contains(&own_static) => (s, e - s),
        Some(_) => {
            tracing::warn!("static data left private: ferroshmem-c is linked into the executable");
            (0, 0)
        }
        None => (0, 0),
    };
    let page = ferroshmem_runtime::shared_memory::page_size();
    let buffer = pe.align::<u8>(page, len.max(1)).await?;
    if len == 0 {
        pe.free(buffer).await.map_err(|e| e.error)?;
        return Ok(None);
    }
    let (fd, file_offset) = pe.heap_file(buffer.offset(), len)?;
    raw::alias_static_data(fd, file_offset, start, len)?;
    Ok(Some(StaticData { start, len, buffer }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
5581a0000000-5581a0001000 r--p 00000000 08:01 123 /opt/prog
5581a0001000-5581a0002000 r-xp 00001000 08:01 123 /opt/prog
5581a0003000-5581a0004000 r--p 00002000 08:01 123 /opt/prog
5581a0004000-5581a0005000 rw-p 00003000 08:01 123 /opt/prog
5581a0005000-5581a0007000 rw-p 00000000 00:00 0
5581a0007000-5581a0009000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000001000 rw-p 00000000 08:01 456 /usr/lib/libc.so.6
";

    #[test]
    fn the_range_is_the_executables_data_and_bss_before_the_heap() {
        assert_eq!(
            writable_range(MAPS, "/opt/prog"),
            Some((0x5581a0004000, 0x5581a0007000))
        );
    }

    #[test]
    fn another_executable_has_no_range_here() {
        assert_eq!(writable_range(MAPS, "/opt/other"), None);
    }
}
