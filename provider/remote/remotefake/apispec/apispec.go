// Package apispec loads a hosted service's published OpenAPI document
// for its fake to check every request and answer against, stricter than
// the document says: an object's property it does not name is refused,
// so that a field of the wrong case fails a test instead of being
// ignored.
package apispec

import (
	"context"
	"fmt"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// Load parses the document named name, checks it (with opts), and
// routes its paths at base, its servers replaced in memory, each object
// schema made to refuse properties it does not name.
func Load(ctx context.Context, name string, doc []byte, base string, opts ...openapi3.ValidationOption) (routers.Router, error) {
	d, err := openapi3.NewLoader().LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("apispec: load %s: %w", name, err)
	}
	if err := d.Validate(ctx, opts...); err != nil {
		return nil, fmt.Errorf("apispec: %s is not valid: %w", name, err)
	}
	d.Servers = openapi3.Servers{{URL: base}}
	strict(d)
	return gorillamux.NewRouter(d)
}

// strict makes every schema with properties, and no word on others,
// refuse the others.
func strict(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(*openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		sc := ref.Value
		seen[sc] = true
		if len(sc.Properties) > 0 && sc.AdditionalProperties.Has == nil && sc.AdditionalProperties.Schema == nil {
			no := false
			sc.AdditionalProperties.Has = &no
		}
		for _, p := range sc.Properties {
			walk(p)
		}
		walk(sc.Items)
		walk(sc.AdditionalProperties.Schema)
		for _, l := range []openapi3.SchemaRefs{sc.AllOf, sc.AnyOf, sc.OneOf} {
			for _, r := range l {
				walk(r)
			}
		}
	}
	if doc.Components != nil {
		for _, ref := range doc.Components.Schemas {
			walk(ref)
		}
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				for _, mt := range op.RequestBody.Value.Content {
					walk(mt.Schema)
				}
			}
			for _, resp := range op.Responses.Map() {
				if resp.Value != nil {
					for _, mt := range resp.Value.Content {
						walk(mt.Schema)
					}
				}
			}
		}
	}
}
