package main

import "github.com/gomlx/gomlx/pkg/core/graph"

// cnnFeatures is the CNN's convolutional part: PLACEHOLDER until merged.
func (n gomlxNet) cnnFeatures(x *graph.Node, params []*graph.Node) (*graph.Node, []*graph.Node,
	func(*graph.Node) []*graph.Node) {
	panic("cnn not yet")
}
