//! The `gpu` NIC handler's side of the NIC, without CUDA: the mlx5 PRM commands it issues
//! through DevX ([`prm`]: the command buffers' fields, [`commands`]: one function per
//! command), opening the device and making and connecting its queues ([`setup`]), and what
//! PEs announce to each other to connect them ([`handles`]).

pub mod commands;
pub mod handles;
pub mod prm;
#[cfg(test)]
mod prm_tests;
pub mod setup;
