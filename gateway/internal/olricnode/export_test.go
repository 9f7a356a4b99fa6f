package olricnode

// DialCluster exposes dialCluster to the external tests, which start real
// nodes through olrictest (an internal test cannot import it: olrictest
// imports this package).
var DialCluster = dialCluster
