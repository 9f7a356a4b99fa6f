package jsonscan

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkValid is a 256 KiB chat body checked whole, as the pylon
// checks every body it relays (the same input as the pylon's own
// benchmark of its validator, so the two compare).
func BenchmarkValid(b *testing.B) {
	pad := strings.Repeat("lorem ipsum dolor sit amet ", 256<<10/27)
	doc := []byte(`{"model":"m","messages":[{"role":"system","content":"` + pad + `"},{"role":"user","content":"hi"}],"stream":true}`)
	b.SetBytes(int64(len(doc)))
	b.Run("jsonscan", func(b *testing.B) {
		for b.Loop() {
			Valid(doc)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			json.Valid(doc)
		}
	})
}

// BenchmarkValidMembers is the pylon's body check (validate a streamed
// chat request and find its stream member in one pass) at the sizes
// benchpath sends.
func BenchmarkValidMembers(b *testing.B) {
	for _, size := range []int{1 << 10, 256 << 10} {
		pad := strings.Repeat("a", size)
		body := []byte(`{"model":"m","messages":[{"role":"system","content":"` + pad + `"},{"role":"user","content":"hi"}],"stream":true,"max_tokens":16}`)
		b.Run(strconv.Itoa(size>>10)+"k", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			stream := false
			for b.Loop() {
				valid, plain := ValidMembers(body, func(k, v []byte) {
					if string(k) == "stream" {
						stream = string(v) == "true"
					}
				})
				if !valid || !plain || !stream {
					b.Fatal("not a streamed chat body")
				}
			}
		})
	}
}
