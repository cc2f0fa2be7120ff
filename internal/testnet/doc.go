// Package testnet holds the network addresses tests need: one that refuses
// every connection (a service that is down) for as long as the test runs.
package testnet
