//! The nemesis: kinds of faults, explicit schedules and swarm settings.
