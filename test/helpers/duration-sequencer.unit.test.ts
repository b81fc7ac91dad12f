import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import type { TestSpecification } from 'vitest/node'
import durations from '../durations.json' with { type: 'json' }
import DurationSequencer from './duration-sequencer.ts'

const root = join(import.meta.dirname, '..', '..')

function spec(project: string, groupOrder: number, path: string): TestSpecification {
  return {
    project: { name: project, config: { sequence: { groupOrder }, isolate: false } },
    moduleId: join(root, path),
  } as unknown as TestSpecification
}

// vitest's sequencer with no cache and no file stats, as in a clean clone.
const sequencer = new DurationSequencer({
  config: { root },
  cache: { getFileTestResults: () => undefined, getFileStats: () => undefined },
} as never)

describe('the duration sequencer', () => {
  it('starts the longest known files of a project first, unknown ones before them, projects in their order', async () => {
    const known = Object.entries(durations as Record<string, number>)
      .filter(([k]) => k.startsWith('integration:'))
      .map(([k, s]) => ({ path: k.slice('integration:'.length), s }))
    const longest = known.reduce((a, b) => (b.s > a.s ? b : a))
    const shortest = known.reduce((a, b) => (b.s < a.s ? b : a))
    const sorted = await sequencer.sort([
      spec('chaos', 2, 'test/chaos/chaos.test.ts'),
      spec('integration', 1, shortest.path),
      spec('integration', 1, 'test/not-in-the-list.test.ts'),
      spec('integration', 1, longest.path),
      spec('unit', 0, 'test/money.unit.test.ts'),
    ])
    expect(sorted.map((f) => `${f.project.name}:${f.moduleId.slice(root.length + 1)}`)).toEqual([
      'unit:test/money.unit.test.ts',
      'integration:test/not-in-the-list.test.ts',
      `integration:${longest.path}`,
      `integration:${shortest.path}`,
      'chaos:test/chaos/chaos.test.ts',
    ])
  })

  it('knows the files of the slow projects', () => {
    const projects = new Set(Object.keys(durations).map((k) => k.slice(0, k.indexOf(':'))))
    for (const p of ['integration', 'chaos', 'browser']) expect(projects).toContain(p)
  })
})
