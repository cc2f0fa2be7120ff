package rules

import "strings"

// Keys. A check's key is its rule's name, escaped so that it holds no '|',
// then '|', then the identity the rule limits, as given:
//
//	per_ip|203.0.113.7
//	tier:free|user:42
//	endpoint:POST /api/v1/upload|key:abc
//	reserve:tier:free|user:42
//
// The global rule limits one identity, so its key is its escaped name alone:
// "global" (and "reserve:global"). The first '|' of a key ends the rule's
// name, and rule names are distinct, so two different (rule, identity)
// pairs never share a key whatever bytes the identity holds.

// escapeName escapes '%' and '|' in a rule name as %25 and %7C.
func escapeName(name string) string {
	if !strings.ContainsAny(name, "%|") {
		return name
	}
	return strings.NewReplacer("%", "%25", "|", "%7C").Replace(name)
}

// keyPrefix is the part of a rule's keys before the identity.
func keyPrefix(name string) string { return escapeName(name) + "|" }
