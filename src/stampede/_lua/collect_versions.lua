--! fragment
-- Collect a version hash `side` through its index `ix` (version_index.lua): mark the
-- unmarked versions older than the current one (`cpad`, its padded stamp; nil: none)
-- replaced, drop the versions marked more than `grace` ago and, past 8 marked, the
-- earliest marked; then write what the caller gathered (`sets`, `dels`) and the
-- index, in one HSET and one HDEL. `stamp` is now as 13 digits, `cutoff` now less
-- `grace`. (The commit marks, commit_marks.lua, are not read here.)
  if cpad and #ix.p > 0 then
    local stay = {}
    for j = 1, #ix.p, 47 do
      local pad = string.sub(ix.p, j, j + 46)
      if pad < cpad then  -- zero-padded: byte order is version order
        sets[#sets + 1] = 'x:' .. vstamp(pad)
        sets[#sets + 1] = now
        ix.i = ix.i .. pad .. 'x' .. stamp
        ix.dirty = true
      else
        stay[#stay + 1] = pad
      end
    end
    ix.p = table.concat(stay)
  end
  local from, size = 1, #ix.i
  while from < size and ((size - from + 1) > 8 * 61
      or string.sub(ix.i, from + 48, from + 60) < cutoff) do
    local st = vstamp(string.sub(ix.i, from, from + 46))
    if st then
      dels[#dels + 1] = 'd:' .. st
      dels[#dels + 1] = 'm:' .. st
      dels[#dels + 1] = 'x:' .. st
    end
    from = from + 61
  end
  if from > 1 then
    ix.i = string.sub(ix.i, from)
    ix.dirty = true
  end
  if ix.dirty then
    sets[#sets + 1] = 'p'
    sets[#sets + 1] = ix.p
    sets[#sets + 1] = 'i'
    sets[#sets + 1] = ix.i
  end
  if #sets > 0 then redis.call('HSET', side, unpack(sets)) end
  if #dels > 0 then redis.call('HDEL', side, unpack(dels)) end
