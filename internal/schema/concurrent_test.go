package schema

import (
	"encoding/json"
	"sync"
	"testing"
)

// TestValidateConcurrently: a compiled schema is shared by every call of
// its tool at once; its values (enum, const) are only read (go test -race).
func TestValidateConcurrently(t *testing.T) {
	s, err := Compile([]byte(`{"type": "object", "properties": {"n": {"enum": [1, 2.5, {"k": [3e0]}]}, "c": {"const": 1.0}},
		"$defs": {"a": {"minimum": 1.1}}, "patternProperties": {"^x": {"$ref": "#/$defs/a"}}}`), Options{CloseObjects: true})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				for args, valid := range map[string]bool{`{"n": 2.50, "c": 1, "x1": 1.1}`: true, `{"n": {"k": [3]}}`: true, `{"n": 3}`: false, `{"c": 1.5}`: false} {
					var v any
					_ = json.Unmarshal([]byte(args), &v)
					if got := s.Validate(v, "arguments").Valid(); got != valid {
						t.Errorf("%s: valid=%v, want %v", args, got, valid)
					}
				}
			}
		}()
	}
	wg.Wait()
}
