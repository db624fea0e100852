//! Small memory builtins. compiler-builtins' `memcpy`/`memmove`/`memset` for Arm are fast
//! (unrolled, every alignment case) and take ~3.3 KB of flash together; these take a few
//! hundred bytes: word copies when both pointers are word-aligned, bytes otherwise. The
//! accesses are volatile so that LLVM cannot turn the loops back into calls to themselves.
//! compiler-builtins defines its versions as weak symbols: these strong ones replace them.

use core::ptr::{read_volatile, write_volatile};

/// Copies `n` bytes from `s` to `d`, lowest address first.
#[inline(never)]
unsafe fn forward(mut d: *mut u8, mut s: *const u8, mut n: usize) {
    // SAFETY (whole body): the caller's memcpy/memmove contract: `d` and `s` are valid for `n`
    // bytes; word accesses only when both are 4-aligned.
    unsafe {
        if (d as usize | s as usize) & 3 == 0 {
            while n >= 4 {
                write_volatile(d.cast::<u32>(), read_volatile(s.cast::<u32>()));
                d = d.add(4);
                s = s.add(4);
                n -= 4;
            }
        }
        while n > 0 {
            write_volatile(d, read_volatile(s));
            d = d.add(1);
            s = s.add(1);
            n -= 1;
        }
    }
}

/// Copies `n` bytes from `s` to `d`, highest address first (`d` above an overlapping `s`).
#[inline(never)]
unsafe fn backward(d: *mut u8, s: *const u8, mut n: usize) {
    // SAFETY: as `forward`.
    unsafe {
        let (mut d, mut s) = (d.add(n), s.add(n));
        if (d as usize | s as usize) & 3 == 0 {
            while n >= 4 {
                d = d.sub(4);
                s = s.sub(4);
                write_volatile(d.cast::<u32>(), read_volatile(s.cast::<u32>()));
                n -= 4;
            }
        }
        while n > 0 {
            d = d.sub(1);
            s = s.sub(1);
            write_volatile(d, read_volatile(s));
            n -= 1;
        }
    }
}

unsafe fn mv(d: *mut u8, s: *const u8, n: usize) {
    // SAFETY: the caller's memmove contract.
    unsafe {
        if (d as usize).wrapping_sub(s as usize) >= n {
            forward(d, s, n)
        } else {
            backward(d, s, n)
        }
    }
}

#[inline(never)]
unsafe fn fill(mut d: *mut u8, n: usize, c: u8) {
    // SAFETY: the caller's memset contract.
    unsafe {
        let end = d.add(n);
        while d < end {
            write_volatile(d, c);
            d = d.add(1);
        }
    }
}

macro_rules! copies {
    ($f:path => $($name:ident),*) => {$(
        /// Memory builtin (see the module docs).
        ///
        /// # Safety
        /// The C library contract.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(d: *mut u8, s: *const u8, n: usize) {
            // SAFETY: the caller's.
            unsafe { $f(d, s, n) }
        }
    )*};
}
copies!(forward => __aeabi_memcpy, __aeabi_memcpy4, __aeabi_memcpy8);
copies!(mv => __aeabi_memmove, __aeabi_memmove4, __aeabi_memmove8);

macro_rules! clears {
    ($($name:ident),*) => {$(
        /// Memory builtin (see the module docs).
        ///
        /// # Safety
        /// The C library contract.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(d: *mut u8, n: usize) {
            // SAFETY: the caller's.
            unsafe { fill(d, n, 0) }
        }
    )*};
}
clears!(__aeabi_memclr, __aeabi_memclr4, __aeabi_memclr8);

macro_rules! sets {
    ($($name:ident),*) => {$(
        /// Memory builtin (see the module docs); note the Arm EABI argument order.
        ///
        /// # Safety
        /// The C library contract.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(d: *mut u8, n: usize, c: i32) {
            // SAFETY: the caller's.
            unsafe { fill(d, n, c as u8) }
        }
    )*};
}
sets!(__aeabi_memset, __aeabi_memset4, __aeabi_memset8);

/// Memory builtin (see the module docs).
///
/// # Safety
/// The C library contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcpy(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller's.
    unsafe { forward(d, s, n) };
    d
}

/// Memory builtin (see the module docs).
///
/// # Safety
/// The C library contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memmove(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller's.
    unsafe { mv(d, s, n) };
    d
}

/// Memory builtin (see the module docs).
///
/// # Safety
/// The C library contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memset(d: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: the caller's.
    unsafe { fill(d, n, c as u8) };
    d
}
