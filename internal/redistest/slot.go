package redistest

import (
	"fmt"
	"strings"
)

// slotCount is the number of Redis Cluster hash slots.
const slotCount = 16384

// keySlot computes a key's cluster slot like Redis does (CRC16/XMODEM of the
// {hash tag} if present, else of the whole key, modulo 16384). StartCluster
// uses it to pick one key per slot range when checking that every master
// serves writes.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % slotCount
}

// keyInRange returns a hash-tagged key ("{k17}") whose slot lies in
// [start, end].
func keyInRange(start, end int) (string, error) {
	for i := 0; i < 1<<20; i++ {
		key := fmt.Sprintf("{k%d}", i)
		if s := keySlot(key); s >= start && s <= end {
			return key, nil
		}
	}
	return "", fmt.Errorf("no key found for slots %d-%d", start, end)
}
