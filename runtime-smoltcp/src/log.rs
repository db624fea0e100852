//! defmt logging behind the `defmt` feature; without it the macros expand to nothing (their
//! arguments are not evaluated, so only pass plain values).

#[cfg(feature = "defmt")]
macro_rules! debug {
    ($($t:tt)*) => { defmt::debug!($($t)*) };
}
#[cfg(not(feature = "defmt"))]
macro_rules! debug {
    ($($t:tt)*) => {{}};
}

#[cfg(feature = "defmt")]
macro_rules! warn {
    ($($t:tt)*) => { defmt::warn!($($t)*) };
}
#[cfg(not(feature = "defmt"))]
macro_rules! warn {
    ($($t:tt)*) => {{}};
}
