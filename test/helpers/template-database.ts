// The migrated database a run's server databases are copied from (global-setup.ts makes it, database.ts
// copies it). Its own module: the global setup runs outside the test files and cannot import vitest there.

/** Named under the run's prefix, so the run's teardown drops it with the rest. */
export function templateDatabase(prefix: string): string {
  return `${prefix}template`
}
