//! The `gpu` NIC handler's side of the NIC: the mlx5 PRM commands it issues through DevX
//! ([`prm`]: the command buffers' fields, [`commands`]: one function per command), and its
//! set-up ([`setup`]).

pub mod commands;
pub mod prm;
#[cfg(test)]
mod prm_tests;
