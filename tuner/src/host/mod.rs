//! The host: whether it is fit to measure on now ([`gate`]), what it is
//! ([`identity`]), and the `/proc` readers ([`procfs`]) and explicit-null
//! values ([`reading`]) both use. Nothing here knows about sweeps.
pub mod gate;
pub mod identity;
pub mod procfs;
pub mod reading;
