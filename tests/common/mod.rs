//! Shared helpers of the integration tests.

#![allow(dead_code)]

pub mod scenarios;
