// Cursor pagination: ?limit=1..100 (default 10) & starting_after=<id>; answers { object: 'list', data, has_more }.
import { ApiError } from '../errors.ts'

export interface Page {
  limit: number
  startingAfter: string | null
}

export function readPage(query: URLSearchParams): Page {
  const raw = query.get('limit')
  let limit = 10
  if (raw !== null) {
    if (!/^\d+$/.test(raw) || Number(raw) < 1 || Number(raw) > 100) {
      throw new ApiError('invalid_parameter', 'limit: must be an integer from 1 to 100', 'limit')
    }
    limit = Number(raw)
  }
  const startingAfter = query.get('starting_after')
  if (startingAfter !== null && !/^[a-z]+_[0-9A-Za-z]+$/.test(startingAfter)) {
    throw new ApiError('invalid_parameter', 'starting_after: must be an object id', 'starting_after')
  }
  return { limit, startingAfter }
}

/** Query with limit + 1 rows, then hand them here. */
export function listResponse<R, T>(rows: R[], page: Page, present: (row: R) => T) {
  const hasMore = rows.length > page.limit
  return { object: 'list', data: rows.slice(0, page.limit).map(present), has_more: hasMore }
}
