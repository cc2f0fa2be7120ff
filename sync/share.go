package reconcile

import "github.com/hybridlimit/hybridlimit/local"

// idleFloor is the part of an even split every active node keeps whatever
// its demand: a tenth. A node that was quiet can still admit its first
// requests before the next round raises its share, and a busy node among idle
// ones still gets nearly everything: with one busy node and three idle, the
// busy one's share is 93% and each idle one's 2%.
const idleFloor = 0.1

// Share is a node's share of a key's global limit: its recent demand over the
// demand of all the key's active nodes, after giving every node a floor of
// idleFloor/nodes of the total. Alone, or with no demand at all, nodes split
// evenly.
func Share(mine, total float64, nodes int) local.Share {
	if nodes <= 1 {
		return local.ShareOne
	}
	if total <= 0 || mine < 0 {
		return local.ShareAmong(nodes)
	}
	floor := idleFloor * total / float64(nodes)
	return local.ShareOf(mine+floor, total+floor*float64(nodes))
}
