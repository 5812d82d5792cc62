//! Which partition of a topic an event goes to: `(murmur2(key as UTF-8) & 0x7fffffff) % N`,
//! with the murmur2 of Kafka's default partitioner (seed `0x9747b28c`), so a Kafka client
//! library in any language computes the same number for the same key.

/// The most partitions a topic may have.
pub const MAX_PARTITIONS: u32 = 1024;

/// Kafka's `Utils.murmur2`: MurmurHash2, 32 bits, seed `0x9747b28c`, the tail read
/// little-endian as Kafka reads it.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = SEED ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of `key` among `partitions` (at least 1): Kafka's
/// `toPositive(murmur2(key)) % partitions`.
pub fn for_key(key: &str, partitions: u32) -> u32 {
    let positive = (murmur2(key.as_bytes()) as u32) & 0x7fff_ffff;
    positive % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors of Kafka's own `UtilsTest.testMurmur2`, librdkafka's and Akka's.
    #[test]
    fn murmur2_matches_kafka() {
        let cases: &[(&[u8], i32)] = &[
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
            // librdkafka's murmur2 test, which matches the Java client.
            (b"kafka", -798_503_068),
            // Every tail length (Akka's Kafka-compatible sharding tests).
            (b"1", -1_993_445_489),
            (b"12", 126_087_238),
            (b"123", -267_702_483),
            (b"1234", -1_614_185_708),
            (b"12345", -1_188_365_604),
        ];
        for (data, want) in cases {
            assert_eq!(murmur2(data), *want, "{}", String::from_utf8_lossy(data));
        }
    }

    #[test]
    fn a_partition_is_the_positive_hash_modulo_the_count() {
        // murmur2("21") is negative: its low 31 bits decide.
        let positive = (-973_932_308i32 as u32) & 0x7fff_ffff;
        assert_eq!(for_key("21", 8), positive % 8);
        assert_eq!(for_key("abc", 1), 0);
        assert_eq!(for_key("abc", 0), 0, "a count of 0 is taken as 1");
        for n in [2, 3, 8, 1024] {
            assert!(for_key("customer-42", n) < n);
        }
    }
}
