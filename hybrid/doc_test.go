package hybrid

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
)

// go doc does not follow the Limit alias or Decision's embedded Result into
// package limit, so their documentation here lists what a user calls: every
// exported field and method of limit.Limit in Limit's, every field of
// limit.Result in Decision's, each as a link. A method or field added to
// limit without a line here fails this test.
func TestDocListsWhatUsersCall(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		require.NoError(t, err)
		parsed = append(parsed, f)
	}
	pkg, err := doc.NewFromFiles(fset, parsed, "github.com/hybridlimit/hybridlimit/hybrid")
	require.NoError(t, err)
	docOf := map[string]string{}
	for _, ty := range pkg.Types {
		docOf[ty.Name] = ty.Doc
	}

	lim := reflect.TypeFor[limit.Limit]()
	var want []string
	for f := range lim.Fields() {
		if f.IsExported() {
			want = append(want, "[limit.Limit."+f.Name+"]")
		}
	}
	for m := range lim.Methods() {
		want = append(want, "[limit.Limit."+m.Name+"]")
	}
	for _, w := range want {
		assert.Contains(t, docOf["Limit"], w, "Limit's documentation lists %s", w)
	}
	for f := range reflect.TypeFor[limit.Result]().Fields() {
		if f.IsExported() {
			assert.Contains(t, docOf["Decision"], "[limit.Result."+f.Name+"]", "Decision's documentation lists %s", f.Name)
		}
	}
	assert.Contains(t, pkg.Doc, "[limit.Limit]", "the package documentation says where Limit lives")
	assert.Contains(t, pkg.Doc, "[limit.Result]", "and Result")
}
