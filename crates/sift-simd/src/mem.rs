//! Memory for large arrays read at random: [`huge_vec`].

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

#[cfg(test)]
mod tests {
    #[test]
    fn holds_the_values_asked_for() {
        for len in [0, 1, 1000, 3 << 20] {
            let v = super::huge_vec(len, || 7u16);
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&x| x == 7));
        }
    }
}
