//! Memory for large arrays read at random ([`huge_vec`]) and buffers on 64-byte boundaries
//! ([`aligned`]).

/// Values of `T` from the start of `buf` to its first 64-byte boundary (a slice of
/// `MaybeUninit<T>`, a vector's spare capacity, as well).
pub fn align_offset<T>(buf: &[T]) -> usize {
    buf.as_ptr().cast::<u8>().align_offset(64) / std::mem::size_of::<T>().max(1)
}

/// `len` values of `buf` from a 64-byte boundary (a cache line's: a vector or tile row
/// there loads one line, not two), `buf` grown as needed. The values are whatever it held,
/// and the same ones [`aligned_view`] reads, as long as it did not grow.
pub fn aligned<T: Copy + Default>(buf: &mut Vec<T>, len: usize) -> &mut [T] {
    let pad = 64 / std::mem::size_of::<T>().max(1);
    if buf.len() < len + pad {
        buf.resize(len + pad, T::default());
    }
    let off = align_offset(buf);
    &mut buf[off..off + len]
}

/// The `len` values [`aligned`] last handed out of `buf` (read-only). Panics when `buf`
/// does not hold them.
pub fn aligned_view<T>(buf: &[T], len: usize) -> &[T] {
    let off = align_offset(buf);
    &buf[off..off + len]
}

/// A vector of `len` values made by `make` whose memory Linux is asked to back with transparent
/// huge pages (`madvise(MADV_HUGEPAGE)`, before any page is touched) where the system
/// allows them on request (`/sys/kernel/mm/transparent_hugepage/enabled`: `always` or
/// `madvise`). For arrays walked at random, an HNSW graph's vectors and links: one TLB
/// entry then covers 2 MiB instead of 4 KiB, and a visit to a point seldom waits for a page
/// walk. A hint only: elsewhere, or where the system refuses, an ordinary vector.
pub fn huge_vec<T>(len: usize, make: impl FnMut() -> T) -> Vec<T> {
    let mut v: Vec<T> = Vec::with_capacity(len);
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let bytes = len * std::mem::size_of::<T>();
        // only worth asking for arrays spanning several huge pages
        if bytes >= 4 << 20 {
            let start = v.as_mut_ptr() as usize;
            let (first, end) = (start.next_multiple_of(PAGE), (start + bytes) / PAGE * PAGE);
            if end > first {
                // SAFETY: [first, end) lies inside the vector's allocation (page-aligned
                // inward); MADV_HUGEPAGE changes how its pages are backed, not their contents,
                // and no page of it has been touched yet. A failure leaves ordinary pages.
                unsafe {
                    libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
                }
            }
        }
    }
    v.extend(std::iter::repeat_with(make).take(len));
    v
}

/// A pointer into a buffer that parallel tasks write in disjoint parts (each task's rows of
/// a product's output), handing each task a slice of its own part.
pub struct Disjoint<T>(*mut T);

impl<T> Clone for Disjoint<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Disjoint<T> {}

// SAFETY: the slices `Disjoint::slice` hands out are the callers' own parts (its contract);
// the values may move between threads as `T: Send` allows.
unsafe impl<T: Send> Send for Disjoint<T> {}
// SAFETY: as above: no two callers hold the same element.
unsafe impl<T: Send> Sync for Disjoint<T> {}

impl<T> Disjoint<T> {
    /// The buffer at `ptr` (possibly uninitialised: the slices are for writing).
    pub fn new(ptr: *mut T) -> Disjoint<T> {
        Disjoint(ptr)
    }

    /// The `len` values from `offset`.
    ///
    /// # Safety
    /// The range must lie inside the buffer, which must outlive the slice, and no other
    /// slice of it may be alive while this one is.
    pub unsafe fn slice<'a>(self, offset: usize, len: usize) -> &'a mut [T] {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(offset), len) }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn aligned_views_start_on_a_cache_line_and_agree() {
        let mut b: Vec<u16> = Vec::new();
        for len in [1usize, 100, 5000] {
            let v = super::aligned(&mut b, len);
            assert_eq!(v.len(), len);
            assert_eq!(v.as_ptr() as usize % 64, 0);
            v.iter_mut().enumerate().for_each(|(i, x)| *x = i as u16);
            let w = super::aligned_view(&b, len);
            assert!(w.iter().enumerate().all(|(i, &x)| x == i as u16));
        }
        let mut f: Vec<f32> = vec![0.0; 3];
        assert_eq!(super::aligned(&mut f, 1000).as_ptr() as usize % 64, 0);
    }

    #[test]
    fn holds_the_values_asked_for() {
        for len in [0, 1, 1000, 3 << 20] {
            let v = super::huge_vec(len, || 7u16);
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&x| x == 7));
        }
    }
}
