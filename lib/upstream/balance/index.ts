// The balancer (CONTRACT section 7): a provider's replicas, the policies that pick one per
// attempt, what keys prefix affinity, and the queue in front of a full fleet (section 13).

export { AffinityKey } from './affinity-key.js';
export { Fleet, Replicas, createPolicy, replicaConfigs, type FleetView, type HealthProbe } from './fleet.js';
export type { BalanceRequest, Policy } from './policy.js';
export { Replica, type ReplicaView } from './replica.js';
export { ProviderQueue, type Slot, type WaitResult, type Waiting } from './queue.js';
export { FairQueue, PRIORITIES, type QueueEntry } from './fair-queue.js';
