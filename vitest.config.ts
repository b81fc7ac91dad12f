import { defineConfig } from 'vitest/config'

// Three projects: fast pure-logic unit tests, integration tests on real parts (PostgreSQL or PGlite,
// anvil, loopback HTTP), and the slow browser suite. `npm test` runs them all.
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          sequence: { groupOrder: 0 },
        },
      },
      {
        test: {
          name: 'integration',
          sequence: { groupOrder: 1 },
          include: ['test/**/*.test.ts'],
          exclude: ['test/unit/**', 'test/browser/**', '**/node_modules/**'],
          globalSetup: ['test/helpers/global-setup.ts'],
          testTimeout: 60_000,
          hookTimeout: 60_000,
          // Two cores: more forks only contend.
          maxWorkers: 2,
          pool: 'forks',
        },
      },
      {
        test: {
          name: 'browser',
          // After the integration suite, alone: a browser and two cores do not share well.
          sequence: { groupOrder: 2 },
          maxWorkers: 1,
          include: ['test/browser/**/*.test.ts'],
          globalSetup: ['test/helpers/global-setup.ts'],
          testTimeout: 90_000,
          hookTimeout: 90_000,
          pool: 'forks',
        },
      },
    ],
  },
})
