// How many data-plane processes share the port: read by the supervisor that forks them and by the settler,
// whose group window follows the share of the calls one process sees.
import { availableParallelism } from 'node:os'
import type { Config } from './schema.ts'

/** How many data-plane processes to run: 0 means one per core. */
export function workerCount(config: Config): number {
  return config.server.workers === 0 ? availableParallelism() : config.server.workers
}
