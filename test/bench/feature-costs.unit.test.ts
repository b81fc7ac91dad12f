import { describe, expect, it } from 'vitest'
import { featureCosts, type ScenarioResult } from '../../bench/report.ts'
import { FEATURES } from '../../bench/scenarios/features.ts'
import { scenarios } from '../../bench/scenarios/index.ts'

const result = (name: string, rps: number, proxy: number, database?: number): ScenarioResult =>
  ({
    name,
    rps,
    ratio_to_direct: null,
    cpu_us_per_req: { proxy, ...(database === undefined ? {} : { database }) },
  }) as unknown as ScenarioResult

describe('feature costs', () => {
  it('prices each feature against its baseline of the same run, skipping pairs not run', () => {
    const costs = featureCosts(
      [
        result('paid-warm', 4000, 140, 99),
        result('feature-listed', 3800, 146.4, 100),
        result('paid-sse', 10, 1),
      ],
      FEATURES,
    )
    expect(costs).toEqual([
      {
        feature: 'discovery counts (listed endpoint)',
        scenario: 'feature-listed',
        baseline: 'paid-warm',
        rps_ratio: 0.95,
        proxy_us_added: 6,
        database_us_added: 1,
      },
    ])
  })

  it('names only scenarios the bench has', () => {
    const names = new Set(scenarios.map((s) => s.name))
    for (const p of FEATURES) expect([names.has(p.scenario), names.has(p.baseline)]).toEqual([true, true])
  })
})
