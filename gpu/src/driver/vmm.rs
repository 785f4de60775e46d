//! Virtual memory management (VMM) allocations: physical memory shared with peers as POSIX
//! file descriptors, the address ranges it is mapped into, and the mappings themselves.

use std::ffi::c_void;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd, RawFd};

use cudarc::driver::sys;
use ferroshmem_runtime::Result;

use super::check;

fn allocation_prop(ordinal: usize) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes:
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: ordinal as i32,
        },
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// The recommended VMM granularity of device `ordinal` (2 MiB on an H200).
pub(crate) fn granularity(ordinal: usize) -> Result<usize> {
    let prop = allocation_prop(ordinal);
    let mut g = 0usize;
    check(
        // SAFETY: valid out-pointer and a fully initialized property struct.
        unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut g,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            )
        },
        "cuMemGetAllocationGranularity",
    )?;
    Ok(g.max(1))
}

/// A physical VMM allocation (created here or imported from a peer); released on drop.
#[derive(Debug)]
pub(crate) struct Physical {
    handle: sys::CUmemGenericAllocationHandle,
    size: usize,
}

impl Physical {
    /// `cuMemCreate` of `size` bytes (a multiple of the granularity) on device `ordinal`,
    /// exportable as a POSIX file descriptor.
    pub fn create(ordinal: usize, size: usize) -> Result<Self> {
        let prop = allocation_prop(ordinal);
        let mut handle = 0;
        check(
            // SAFETY: valid out-pointer and property struct; the caller bound a context.
            unsafe { sys::cuMemCreate(&mut handle, size, &prop, 0) },
            "cuMemCreate (GPU symmetric heap)",
        )?;
        Ok(Physical { handle, size })
    }

    /// Exports the allocation as a new file descriptor (`cuMemExportToShareableHandle`).
    pub fn export_fd(&self) -> Result<OwnedFd> {
        let mut fd: RawFd = -1;
        check(
            // SAFETY: for POSIX fd handles the driver writes an `int` into the pointed-to value.
            unsafe {
                sys::cuMemExportToShareableHandle(
                    (&mut fd as *mut RawFd).cast::<c_void>(),
                    self.handle,
                    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                    0,
                )
            },
            "cuMemExportToShareableHandle",
        )?;
        // SAFETY: on success the driver created `fd` for us; nobody else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Imports a peer's allocation from its descriptor; `size` is the peer's allocation size.
    pub fn import(fd: OwnedFd, size: usize) -> Result<Self> {
        let raw = fd.into_raw_fd();
        let mut handle = 0;
        // SAFETY: for POSIX fd handles the fd is passed by value in the pointer argument.
        let status = unsafe {
            sys::cuMemImportFromShareableHandle(
                &mut handle,
                raw as usize as *mut c_void,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            )
        };
        // SAFETY: `raw` came from an OwnedFd we consumed; the driver keeps its own reference.
        drop(unsafe { OwnedFd::from_raw_fd(raw) });
        check(status, "cuMemImportFromShareableHandle")?;
        Ok(Physical { handle, size })
    }
}

impl Drop for Physical {
    fn drop(&mut self) {
        // SAFETY: the handle came from cuMemCreate/import and is released once.
        let status = unsafe { sys::cuMemRelease(self.handle) };
        if let Err(e) = check(status, "cuMemRelease") {
            tracing::warn!("{e}");
        }
    }
}

/// A reserved virtual address range; freed on drop (after its mappings).
#[derive(Debug)]
pub(crate) struct AddressRange {
    base: u64,
    size: usize,
}

impl AddressRange {
    /// Reserves `size` bytes aligned to `align`.
    pub fn reserve(size: usize, align: usize) -> Result<Self> {
        let mut base = 0;
        check(
            // SAFETY: valid out-pointer; no fixed address requested.
            unsafe { sys::cuMemAddressReserve(&mut base, size, align, 0, 0) },
            "cuMemAddressReserve",
        )?;
        Ok(AddressRange { base, size })
    }

    /// First address of the range.
    pub fn base(&self) -> u64 {
        self.base
    }
}

impl Drop for AddressRange {
    fn drop(&mut self) {
        // SAFETY: reserved by us, freed once, after every Mapping inside it was dropped.
        let status = unsafe { sys::cuMemAddressFree(self.base, self.size) };
        if let Err(e) = check(status, "cuMemAddressFree") {
            tracing::warn!("{e}");
        }
    }
}

/// A physical allocation mapped at an address, readable and writable by one device; unmapped
/// on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    at: u64,
    physical: Physical,
}

impl Mapping {
    /// Maps all of `physical` at `at` (inside a reserved range) and grants device `ordinal`
    /// read-write access.
    pub fn map(at: u64, physical: Physical, ordinal: usize) -> Result<Self> {
        check(
            // SAFETY: `at..at+size` lies in a range we reserved and is not yet mapped.
            unsafe { sys::cuMemMap(at, physical.size, 0, physical.handle, 0) },
            "cuMemMap",
        )?;
        let mapping = Mapping { at, physical };
        let desc = sys::CUmemAccessDesc {
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: ordinal as i32,
            },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        check(
            // SAFETY: the range was just mapped; one valid descriptor.
            unsafe { sys::cuMemSetAccess(at, mapping.physical.size, &desc, 1) },
            "cuMemSetAccess",
        )?;
        Ok(mapping)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped by us at `at`, unmapped once; the physical handle is released after.
        let status = unsafe { sys::cuMemUnmap(self.at, self.physical.size) };
        if let Err(e) = check(status, "cuMemUnmap") {
            tracing::warn!("{e}");
        }
    }
}
