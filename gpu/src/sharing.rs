//! [`GpuSharing`]: who else uses a PE's GPU — nobody, other PEs of the same process, or PEs
//! of other processes — found when the PE sets its GPU up, and reported then. Every PE that
//! shares a GPU has a context of its own, so their kernels run side by side under CUDA MPS
//! and take turns without it.

/// Who else uses a PE's GPU, as found at set-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSharing {
    /// No other PE of the node uses this GPU.
    Alone,
    /// Other PEs of this process use it. Each PE has a context of its own (and its own
    /// heap, streams and device state), so that a synchronizing call of one never waits
    /// for another's kernels; like PEs of different processes, their kernels run side by
    /// side under CUDA MPS and take turns without it.
    InProcess {
        /// The other PEs of this process on this GPU.
        with: Vec<usize>,
        /// Whether CUDA MPS serves this GPU.
        mps: bool,
    },
    /// PEs of other processes use it too (and maybe of this one).
    Processes {
        /// The other PEs on this GPU, in whatever process.
        with: Vec<usize>,
        /// Whether CUDA MPS serves this GPU: under MPS the processes' kernels run side by
        /// side; without it they take turns (time slices), so a kernel waiting for another
        /// process's kernel on this GPU waits for the driver to switch.
        mps: bool,
        /// Whether some of them are PEs of this process.
        in_process: bool,
    },
}

impl GpuSharing {
    /// Works out the sharing from the PEs found on this PE's GPU (`same_gpu`, each with
    /// whether it lives in this process) and whether MPS serves the GPU.
    pub(crate) fn from_peers(same_gpu: &[(usize, bool)], mps: bool) -> GpuSharing {
        let with: Vec<usize> = same_gpu.iter().map(|(pe, _)| *pe).collect();
        let in_process = same_gpu.iter().any(|(_, here)| *here);
        if with.is_empty() {
            GpuSharing::Alone
        } else if same_gpu.iter().all(|(_, here)| *here) {
            GpuSharing::InProcess { with, mps }
        } else {
            GpuSharing::Processes {
                with,
                mps,
                in_process,
            }
        }
    }

    /// Says at set-up how the GPU is shared (a warning where kernels of different
    /// processes on it take turns).
    pub(crate) fn report(&self, my_pe: usize, ordinal: usize) {
        match self {
            GpuSharing::Alone => {}
            GpuSharing::InProcess { with, mps: true } => tracing::info!(
                pe = my_pe,
                gpu = ordinal,
                ?with,
                "PEs of this process share the GPU under CUDA MPS, a context each"
            ),
            GpuSharing::InProcess { with, mps: false } => tracing::warn!(
                pe = my_pe,
                gpu = ordinal,
                ?with,
                "PEs of this process share GPU {ordinal} without CUDA MPS, a context each: their kernels take turns, so a kernel waiting for another PE's kernel waits for the driver to switch (start nvidia-cuda-mps-control -d for side-by-side kernels)"
            ),
            GpuSharing::Processes { with, mps: true, .. } => tracing::info!(
                pe = my_pe,
                gpu = ordinal,
                ?with,
                "PEs of several processes share the GPU under CUDA MPS"
            ),
            GpuSharing::Processes { with, mps: false, .. } => tracing::warn!(
                pe = my_pe,
                gpu = ordinal,
                ?with,
                "PEs of several processes share GPU {ordinal} without CUDA MPS: their kernels take turns, so a kernel waiting for another process's kernel waits for the driver to switch (start nvidia-cuda-mps-control -d for side-by-side kernels)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::GpuSharing;

    #[test]
    fn sharing_is_told_from_the_pes_on_the_gpu() {
        assert_eq!(GpuSharing::from_peers(&[], true), GpuSharing::Alone);
        let in_process = GpuSharing::from_peers(&[(1, true), (3, true)], false);
        assert_eq!(
            in_process,
            GpuSharing::InProcess {
                with: vec![1, 3],
                mps: false
            }
        );
        let processes = GpuSharing::from_peers(&[(2, false)], true);
        assert_eq!(
            processes,
            GpuSharing::Processes {
                with: vec![2],
                mps: true,
                in_process: false
            }
        );
        let both = GpuSharing::from_peers(&[(0, true), (2, false)], false);
        assert!(matches!(
            both,
            GpuSharing::Processes {
                in_process: true,
                ..
            }
        ));
    }
}
