// The group commit's mechanism: requests that arrive while a group is in flight go in the next one; a group
// that fails whole is run again one request a group, or, with rerunAlone off, fails each of its requests.
import { describe, expect, it } from 'vitest'
import { Grouped } from '../../src/db/grouped.ts'

/** A run that records its groups and fails the first group of more than one request. */
function failingOnce() {
  const groups: number[][] = []
  let failed = false
  const run = async (requests: number[]) => {
    groups.push([...requests])
    await new Promise((r) => setTimeout(r, 5))
    if (!failed && requests.length > 1) {
      failed = true
      throw new Error('the group was lost')
    }
    return requests.map((n) => n * 10)
  }
  return { groups, run }
}

describe('Grouped', () => {
  it('groups what arrives while a group is in flight, and runs a failed group again one request a group', async () => {
    const { groups, run } = failingOnce()
    const grouped = new Grouped(run, 10)
    const answers = await Promise.all([1, 2, 3].map((n) => grouped.submit(n)))
    expect(answers).toEqual([10, 20, 30])
    // 1 alone (idle), 2 and 3 together (failed), then each alone.
    expect(groups).toEqual([[1], [2, 3], [2], [3]])
  })

  it('with rerunAlone off, fails each request of a failed group with its error and runs none again', async () => {
    const { groups, run } = failingOnce()
    const grouped = new Grouped(run, 10, { rerunAlone: false })
    const answers = await Promise.allSettled([1, 2, 3].map((n) => grouped.submit(n)))
    expect(answers.map((a) => (a.status === 'fulfilled' ? a.value : (a.reason as Error).message))).toEqual([
      10,
      'the group was lost',
      'the group was lost',
    ])
    expect(groups).toEqual([[1], [2, 3]])
    // The next group runs as usual.
    expect(await grouped.submit(4)).toBe(40)
  })
})
