-- The look for a payment's free figure (src/books/payments.ts, freeFigure) as a function whose plan is made
-- with sequential scans off. The look was a subquery of the creation's statement, and a prepared statement
-- keeps the plan it first settled on: made while checkout_amounts was empty (a new database, vacuumed before
-- its first payment), that plan read the whole table, twice per creation, and went on doing so as the table
-- grew, until an ANALYZE replanned it (the bench's payment-create run: ~730 µs of backend CPU per creation
-- over 7,000 creations of one price). A function's plans are its own: this one reads only the bound figures
-- of the windows it is given, by the primary key, whatever the table held when a session first called it.
--
-- Bitmap scans off too: the walk wants the primary key's rows in order, one at a time, to stop at the first
-- gap (a bitmap scan reads the whole window and sorts it). force_generic_plan: the windows' bounds are
-- parameters; a custom plan per call would cost more than the walk itself.

-- The lowest free figure of [low, high], else of [else_low, else_high] (a window not given, null, is empty);
-- null when every figure of both is bound. A figure is free unless bound to a payment: open (held_until
-- null), or held and not past its hold (a row past its hold is free: the creation's insert takes it over).
-- Each window's bound figures are walked upwards from its start until the first gap: a window with a free
-- figure near its start reads a row or two, a full one reads each of its rows once.
CREATE FUNCTION checkout_free_figure(low bigint, high bigint, else_low bigint, else_high bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  windows bigint[] := ARRAY[low, high, else_low, else_high];
  window_low bigint;
  window_high bigint;
  next_free bigint;
  bound bigint;
BEGIN
  FOR w IN 0..1 LOOP
    window_low := windows[2 * w + 1];
    window_high := windows[2 * w + 2];
    next_free := window_low;
    FOR bound IN
      SELECT c.amount_atomic FROM checkout_amounts c
      WHERE c.amount_atomic BETWEEN window_low AND window_high
        AND (c.held_until IS NULL OR c.held_until > now())
      ORDER BY c.amount_atomic
    LOOP
      EXIT WHEN bound <> next_free;
      next_free := next_free + 1;
    END LOOP;
    IF next_free <= window_high THEN
      RETURN next_free;
    END IF;
  END LOOP;
  RETURN NULL;
END $$;
