import { defineConfig } from 'vitest/config'
import DurationSequencer from './test/helpers/duration-sequencer.ts'

// Four projects: fast pure-logic unit tests, integration tests on real parts (PostgreSQL or PGlite,
// anvil, loopback HTTP), the chaos run (faults under paid load), and the slow browser suite. `npm test` runs them all.
export default defineConfig({
  // Outside node_modules, which `npm ci` deletes: vitest keeps each file's last duration there (read by
  // scripts/test-durations.mjs).
  cacheDir: '.cache/vite',
  test: {
    // The longest files first by test/durations.json (committed), where vitest's cache is missing, as in CI.
    sequence: { sequencer: DurationSequencer },
    // After the default summary: the server-only tests skipped and how to run them (run-summary-reporter.ts).
    reporters: ['default', './test/helpers/run-summary-reporter.ts'],
    projects: [
      {
        test: {
          name: 'unit',
          // Pure logic, no database or chain: named *.unit.test.ts beside the integration tests of their folder.
          include: ['test/**/*.unit.test.ts'],
          sequence: { groupOrder: 0 },
          // Pure functions and their own objects: one module graph per worker instead of one per file (the
          // project's 54 files took 16 s importing, one at a time; 3 s with this).
          isolate: false,
          maxWorkers: 2,
        },
      },
      {
        test: {
          name: 'integration',
          sequence: { groupOrder: 1 },
          include: ['test/**/*.test.ts'],
          exclude: ['test/**/*.unit.test.ts', 'test/browser/**', 'test/chaos/**', '**/node_modules/**'],
          globalSetup: ['test/helpers/global-setup.ts'],
          setupFiles: ['test/helpers/embedded-image-setup.ts'],
          testTimeout: 60_000,
          hookTimeout: 60_000,
          // Two cores: more forks only contend.
          maxWorkers: 2,
          pool: 'forks',
          // Each fork runs file after file on one module graph instead of importing src/service.ts and the
          // published clients afresh per file (~2 s of CPU each). Files share nothing else: each starts and
          // stops its own services, databases and chains, and the setup file runs again before each.
          isolate: false,
        },
      },
      {
        test: {
          name: 'chaos',
          // After the integration suite, without it. Each file starts its own PostgreSQL cluster, anvil and
          // server processes on free ports and asserts invariants, not timings: two files at a time (the
          // project's 18 files, with the browser's: 352 s one at a time, 221 s two at a time, all green).
          sequence: { groupOrder: 2 },
          maxWorkers: 2,
          include: ['test/chaos/**/*.test.ts'],
          testTimeout: 240_000,
          hookTimeout: 60_000,
          pool: 'forks',
        },
      },
      {
        test: {
          name: 'browser',
          // After the integration suite, alone: a browser and two cores do not share well.
          sequence: { groupOrder: 3 },
          maxWorkers: 1,
          include: ['test/browser/**/*.test.ts'],
          globalSetup: ['test/helpers/global-setup.ts'],
          setupFiles: ['test/helpers/embedded-image-setup.ts'],
          testTimeout: 90_000,
          hookTimeout: 90_000,
          pool: 'forks',
        },
      },
    ],
  },
})
