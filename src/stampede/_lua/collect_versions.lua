--! fragment
-- Collect a version hash `side` through its index, the locals `ixp`, `ixi` and
-- `dirty` (version_index.lua): mark the unmarked versions older than the current one
-- (`cpad`, its padded stamp; nil: none) replaced, drop the versions marked more than
-- `grace` ago and, past 8 marked, the earliest marked; then write what the caller
-- gathered (`sets`, `dels`) and the index, in one HSET and one HDEL. `stamp` is now
-- as 13 digits, `cutoff` now less `grace` (made here if nil: the first time a mark is
-- looked at). (The commit marks, commit_marks.lua, are not read here.)
  if cpad and #ixp > 0 and ixp ~= cpad then  -- (the current version alone: nothing older)
    local stay = {}
    for j = 1, #ixp, 47 do
      local pad = string.sub(ixp, j, j + 46)
      if pad < cpad then  -- zero-padded: byte order is version order
        sets[#sets + 1] = 'x:' .. vstamp(pad)
        sets[#sets + 1] = stamp
        ixi = ixi .. pad .. 'x' .. stamp
        dirty = true
      else
        stay[#stay + 1] = pad
      end
    end
    ixp = table.concat(stay)
  end
  local from, size = 1, #ixi
  if from < size and not cutoff then cutoff = string.format('%013d', now - grace) end
  while from < size and ((size - from + 1) > 8 * 61
      or string.sub(ixi, from + 48, from + 60) < cutoff) do
    local st = vstamp(string.sub(ixi, from, from + 46))
    if st then
      dels[#dels + 1] = 'd:' .. st
      dels[#dels + 1] = 'm:' .. st
      dels[#dels + 1] = 'x:' .. st
    end
    from = from + 61
  end
  if from > 1 then
    ixi = string.sub(ixi, from)
    dirty = true
  end
  if dirty then
    sets[#sets + 1] = 'p'
    sets[#sets + 1] = ixp
    sets[#sets + 1] = 'i'
    sets[#sets + 1] = ixi
  end
  if #sets > 0 then redis.call('HSET', side, unpack(sets)) end
  if #dels > 0 then redis.call('HDEL', side, unpack(dels)) end
