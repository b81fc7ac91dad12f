// Starts the longest test files first, by the durations committed in test/durations.json, so the two workers
// of a project finish together instead of one running a 40 s file started last while the other idles.
// vitest's own sequencer does the same from its cache (.cache/vite), which a clean clone, as in CI, does not
// have: it then starts the largest files first, and file size says little of a file's time (a short file
// that starts a chain and three services outlasts a long one of pure checks). Files the list does not know
// (new ones) go first, as vitest runs unknown files first; `node scripts/test-durations.mjs [checkout]`
// writes the list again from the cache of a run of every project.
import { readFileSync } from 'node:fs'
import { relative } from 'node:path'
import { BaseSequencer, type TestSpecification } from 'vitest/node'

/** `project:path` (the path from the repository root, as vitest's cache keys them) → seconds. */
type Durations = Record<string, number>

function readDurations(path: URL): Durations {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as Durations
  } catch {
    return {} // absent or unreadable: vitest's order
  }
}

const durations = readDurations(new URL('../durations.json', import.meta.url))

export default class DurationSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    // vitest's order first (project groups, then its cache or file sizes); the known durations reorder
    // within a project, the sort being stable for files they do not tell apart.
    const base = await super.sort(files)
    const root = this.ctx.config.root
    const seconds = (f: TestSpecification): number =>
      durations[`${f.project.name}:${relative(root, f.moduleId)}`] ?? Number.POSITIVE_INFINITY
    return base
      .map((f, i) => ({ f, i, s: seconds(f) }))
      .sort((a, b) => {
        const order =
          a.f.project.config.sequence.groupOrder - b.f.project.config.sequence.groupOrder ||
          (a.f.project.name < b.f.project.name ? -1 : a.f.project.name > b.f.project.name ? 1 : 0)
        if (order !== 0) return order
        if (a.s !== b.s) return b.s - a.s
        return a.i - b.i
      })
      .map(({ f }) => f)
  }
}
