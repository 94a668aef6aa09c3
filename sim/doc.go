// Package sim is hone's simulated backend: the CPU exercise's exact
// deterministic queueing model (Run), used for the exercise, instant
// what-if answers and the optimizer's unit tests.
//
// Every figure it produces is labelled kind "simulation_only". Its
// colocated and disaggregated modes have different resource models, so their
// speed ratio says nothing about performance at equal GPU cost.
//
// Command carries out hone sim (a Scan, printed as a table or JSON);
// cmd/hone only turns the flags into CommandOptions.
//
// sim must not import optimizer or gate.
package sim
