// The balancer (CONTRACT section 7): a provider's replicas, the policies that pick one per
// attempt, and what keys prefix affinity.

export { AffinityKey } from './affinity-key.js';
export { Fleet, Replicas, createPolicy, replicaConfigs, type FleetView, type HealthProbe } from './fleet.js';
export type { BalanceRequest, Policy } from './policy.js';
export { Replica, type ReplicaView } from './replica.js';
