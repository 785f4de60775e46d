//! Shared helpers of the integration tests.

#![allow(dead_code)]

pub mod collective_scenarios;
pub mod scenarios;
