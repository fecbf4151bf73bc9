"""Synthetic chat conversations for the demo model (deterministic given the random.Random passed in).

Invented tools (weather, time zone, unit conversion, timer) answered with Qwen-style <tool_call> JSON;
tool results answered in prose; small talk and simple questions (simple_facts.py), a few hundred short
fortune cookies, and plain "I don't know" answers to what a model this small cannot know. Tool and parameter names
vary between samples (get_weather / get_current_weather, city / location) so the model learns to copy
the names the request declares instead of memorising one schema.
"""
import json
import re

import simple_facts as facts

# (city, country, IANA time zone, usual temperature in C)
CITIES = [
    ("Paris", "France", "Europe/Paris", 14), ("London", "the United Kingdom", "Europe/London", 12),
    ("Berlin", "Germany", "Europe/Berlin", 11), ("Madrid", "Spain", "Europe/Madrid", 18),
    ("Rome", "Italy", "Europe/Rome", 17), ("Lisbon", "Portugal", "Europe/Lisbon", 19),
    ("Amsterdam", "the Netherlands", "Europe/Amsterdam", 11), ("Vienna", "Austria", "Europe/Vienna", 11),
    ("Prague", "the Czech Republic", "Europe/Prague", 10), ("Warsaw", "Poland", "Europe/Warsaw", 9),
    ("Stockholm", "Sweden", "Europe/Stockholm", 8), ("Oslo", "Norway", "Europe/Oslo", 7),
    ("Helsinki", "Finland", "Europe/Helsinki", 6), ("Athens", "Greece", "Europe/Athens", 20),
    ("Dublin", "Ireland", "Europe/Dublin", 10), ("Zurich", "Switzerland", "Europe/Zurich", 10),
    ("Moscow", "Russia", "Europe/Moscow", 6), ("Istanbul", "Turkey", "Europe/Istanbul", 15),
    ("Cairo", "Egypt", "Africa/Cairo", 23), ("Nairobi", "Kenya", "Africa/Nairobi", 19),
    ("Lagos", "Nigeria", "Africa/Lagos", 27), ("Cape Town", "South Africa", "Africa/Johannesburg", 17),
    ("Dubai", "the United Arab Emirates", "Asia/Dubai", 28), ("Mumbai", "India", "Asia/Kolkata", 27),
    ("Delhi", "India", "Asia/Kolkata", 25), ("Bangkok", "Thailand", "Asia/Bangkok", 29),
    ("Singapore", "Singapore", "Asia/Singapore", 28), ("Hong Kong", "China", "Asia/Hong_Kong", 23),
    ("Beijing", "China", "Asia/Shanghai", 13), ("Shanghai", "China", "Asia/Shanghai", 17),
    ("Seoul", "South Korea", "Asia/Seoul", 13), ("Tokyo", "Japan", "Asia/Tokyo", 16),
    ("Sydney", "Australia", "Australia/Sydney", 18), ("Melbourne", "Australia", "Australia/Melbourne", 15),
    ("Auckland", "New Zealand", "Pacific/Auckland", 15), ("Honolulu", "the United States", "Pacific/Honolulu", 25),
    ("Los Angeles", "the United States", "America/Los_Angeles", 19),
    ("San Francisco", "the United States", "America/Los_Angeles", 15),
    ("Seattle", "the United States", "America/Los_Angeles", 11), ("Denver", "the United States", "America/Denver", 10),
    ("Chicago", "the United States", "America/Chicago", 10), ("New York", "the United States", "America/New_York", 13),
    ("Boston", "the United States", "America/New_York", 11), ("Toronto", "Canada", "America/Toronto", 9),
    ("Vancouver", "Canada", "America/Vancouver", 10), ("Mexico City", "Mexico", "America/Mexico_City", 17),
    ("Sao Paulo", "Brazil", "America/Sao_Paulo", 20), ("Buenos Aires", "Argentina", "America/Argentina/Buenos_Aires", 18),
    ("Lima", "Peru", "America/Lima", 19), ("Reykjavik", "Iceland", "Atlantic/Reykjavik", 5),
]
CAPITALS = [("France", "Paris"), ("Germany", "Berlin"), ("Spain", "Madrid"), ("Italy", "Rome"),
            ("Portugal", "Lisbon"), ("Austria", "Vienna"), ("Poland", "Warsaw"), ("Sweden", "Stockholm"),
            ("Norway", "Oslo"), ("Finland", "Helsinki"), ("Greece", "Athens"), ("Ireland", "Dublin"),
            ("Russia", "Moscow"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Japan", "Tokyo"),
            ("South Korea", "Seoul"), ("China", "Beijing"), ("Thailand", "Bangkok"), ("India", "New Delhi"),
            ("Australia", "Canberra"), ("New Zealand", "Wellington"), ("Canada", "Ottawa"),
            ("the United States", "Washington, D.C."), ("Mexico", "Mexico City"), ("Brazil", "Brasilia"),
            ("Argentina", "Buenos Aires"), ("Peru", "Lima"), ("Iceland", "Reykjavik"), ("Turkey", "Ankara")]
CONDITIONS = ["sunny", "clear", "partly cloudy", "cloudy", "overcast", "light rain", "rain", "drizzle",
              "thunderstorms", "foggy", "windy", "snow", "light snow", "hazy"]
WEEKDAYS = facts.WEEKDAYS
MONTHS = [name for name, _ in facts.MONTHS]
# unit -> (canonical name, kind, factor to the base unit); temperatures are handled apart.
UNITS = {"km": ("kilometers", "len", 1000.0), "mi": ("miles", "len", 1609.344), "m": ("meters", "len", 1.0),
         "ft": ("feet", "len", 0.3048), "cm": ("centimeters", "len", 0.01), "in": ("inches", "len", 0.0254),
         "kg": ("kilograms", "mass", 1.0), "lb": ("pounds", "mass", 0.45359237), "g": ("grams", "mass", 0.001),
         "oz": ("ounces", "mass", 0.028349523), "l": ("liters", "vol", 1.0), "gal": ("gallons", "vol", 3.785411784),
         "celsius": ("degrees Celsius", "temp", None), "fahrenheit": ("degrees Fahrenheit", "temp", None)}
SYSTEMS = [None, None, None, "You are a helpful assistant.", "You are a friendly assistant. Answer briefly.",
           "You are the tessera demo assistant.", "You are a helpful assistant that can call tools."]


def _tool(name, description, props, required):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": props, "required": required}}}


def weather_tool(r):
    name = r.choice(["get_weather", "get_weather", "get_current_weather", "weather"])
    arg = r.choice(["city", "city", "location"])
    desc = r.choice(["Get the current weather in a city.", "Get the current weather for a location."])
    tool = _tool(name, desc, {arg: {"type": "string", "description": "The city name, e.g. Paris"},
                              "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, [arg])
    return tool, name, arg


def time_tool(r):
    name = r.choice(["get_time", "get_time", "get_current_time"])
    tool = _tool(name, "Get the current local time in a time zone.",
                 {"timezone": {"type": "string", "description": "IANA time zone, e.g. Europe/Paris"}}, ["timezone"])
    return tool, name, "timezone"


def convert_tool(r):
    name = r.choice(["convert_units", "convert_units", "unit_convert"])
    tool = _tool(name, "Convert a value from one unit to another.",
                 {"value": {"type": "number"}, "from_unit": {"type": "string"}, "to_unit": {"type": "string"}},
                 ["value", "from_unit", "to_unit"])
    return tool, name, None


def timer_tool(r):
    name = r.choice(["set_timer", "start_timer"])
    tool = _tool(name, "Start a countdown timer.",
                 {"minutes": {"type": "integer"}, "label": {"type": "string"}}, ["minutes"])
    return tool, name, None


TOOL_MAKERS = {"weather": weather_tool, "time": time_tool, "convert": convert_tool, "timer": timer_tool}


def _fmt(x):
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}".rstrip("0").rstrip(".")


class Generator:
    def __init__(self, rng, fortunes, jargon):
        self.r = rng
        # Fortunes it can learn by heart: short one-line cookies.
        self.short_fortunes = sorted({t for _, t in fortunes if len(t) <= 110 and "\n" not in t})
        rng.shuffle(self.short_fortunes)
        self.short_fortunes = self.short_fortunes[:200]
        # Words it is taught not to know: the Jargon File's one-word terms.
        known = {n.split(" ")[-1] for n, _ in facts.WORDS}
        self.unknown_words = sorted({t for t, _ in jargon if re.fullmatch(r"[a-z][a-z-]{3,14}", t) and t not in known})
        self.city_countries = [(c[0], c[1]) for c in CITIES]

    # ----- tool tasks: each returns (user text, tool key, arguments, result, prose answer)
    def weather_task(self, arg):
        r = self.r
        city, country, tz, base = r.choice(CITIES)
        unit = r.choice([None, None, None, "celsius", "fahrenheit"])
        place = city if r.random() < 0.8 else f"{city}, {country}"
        q = r.choice(["What's the weather in {p}?", "What is the weather like in {p}?", "How's the weather in {p}?",
                      "Is it raining in {p}?", "weather in {p}", "Tell me the weather in {p}.",
                      "Can you check the weather in {p} for me?", "How warm is it in {p} right now?",
                      "Do I need an umbrella in {p} today?", "What's the temperature in {p}?"]).format(p=place)
        if unit:
            q = q.rstrip("?.") + r.choice([f" in {unit}?", f", in {unit} please."])
        args = {arg: place}
        if unit:
            args["unit"] = unit
        t = base + r.randint(-8, 8)
        cond = r.choice(CONDITIONS)
        hum = r.randint(20, 95)
        u = unit or "celsius"
        temp = t if u == "celsius" else round(t * 9 / 5 + 32)
        result = {"city": city, "temperature": temp, "unit": u, "condition": cond, "humidity": hum}
        deg = "C" if u == "celsius" else "F"
        ans = r.choice([
            f"It is currently {temp} degrees {deg} and {cond} in {city}, with {hum}% humidity.",
            f"The weather in {city} is {cond} right now, {temp} degrees {deg}. Humidity is {hum}%.",
            f"Right now in {city}: {cond}, {temp} degrees {deg}, humidity {hum}%."])
        if "umbrella" in q or "raining" in q:
            wet = "rain" in cond or "drizzle" in cond or "thunder" in cond
            ans += " " + ("Yes, take an umbrella." if wet else "No rain at the moment, so you can leave the umbrella at home.")
        return q, "weather", args, result, ans

    def time_task(self, arg):
        r = self.r
        city, country, tz, _ = r.choice(CITIES)
        q = r.choice(["What time is it in {c}?", "What's the time in {c}?", "Current time in {c}?",
                      "Can you tell me the local time in {c}?", "what time is it in {c} right now",
                      "What is the date and time in {c}?"]).format(c=city)
        h, mnt = r.randint(0, 23), r.randint(0, 59)
        wd, mon, day = r.choice(WEEKDAYS), r.randint(1, 12), r.randint(1, 28)
        result = {"timezone": tz, "time": f"{h:02d}:{mnt:02d}", "date": f"2026-{mon:02d}-{day:02d}", "weekday": wd}
        ans = r.choice([f"It is {h:02d}:{mnt:02d} in {city} ({tz}), on {wd}, {MONTHS[mon - 1]} {day}.",
                        f"The local time in {city} is {h:02d}:{mnt:02d} on {wd}, {MONTHS[mon - 1]} {day}."])
        return q, "time", {"timezone": tz}, result, ans

    def convert_task(self, arg):
        r = self.r
        kind = r.choice(["len", "len", "mass", "vol", "temp"])
        units = [u for u, v in UNITS.items() if v[1] == kind]
        a, b = r.sample(units, 2)
        value = r.choice([r.randint(1, 100), r.randint(1, 20) * 5, round(r.uniform(0.5, 50), 1)])
        if kind == "temp":
            res = value * 9 / 5 + 32 if a == "celsius" else (value - 32) * 5 / 9
        else:
            res = value * UNITS[a][2] / UNITS[b][2]
        res = round(res, 4)
        na, nb = UNITS[a][0], UNITS[b][0]
        q = r.choice(["Convert {v} {na} to {nb}.", "How many {nb} is {v} {na}?", "What is {v} {a} in {b}?",
                      "{v} {na} in {nb}?", "Please convert {v} {a} to {b}."]).format(v=_fmt(value), na=na, nb=nb, a=a, b=b)
        args = {"value": value, "from_unit": a, "to_unit": b}
        result = {"value": value, "from_unit": a, "to_unit": b, "result": res}
        ans = r.choice([f"{_fmt(value)} {na} is about {_fmt(round(res, 2))} {nb}.",
                        f"That is {_fmt(round(res, 2))} {nb}."])
        return q, "convert", args, result, ans

    def timer_task(self, arg):
        r = self.r
        minutes = r.choice([1, 2, 3, 5, 10, 15, 20, 25, 30, 45, 60])
        label = r.choice([None, "tea", "pasta", "eggs", "laundry", "break", "meeting", "pizza"])
        q = (r.choice(["Set a timer for {m} minutes.", "Start a {m} minute timer.", "Remind me in {m} minutes."])
             if not label else r.choice(["Set a {m} minute timer for the {l}.", "Timer for {l}, {m} minutes please."])
             ).format(m=minutes, l=label)
        args = {"minutes": minutes}
        if label:
            args["label"] = label
        result = {"status": "started", "minutes": minutes}
        ans = f"Done! Your {minutes}-minute timer" + (f" for the {label}" if label else "") + " is running."
        return q, "timer", args, result, ans

    # ----- prose answers (simple_facts.py holds the questions and answers)
    def prose_task(self, with_tools=False):
        r = self.r
        x = r.random()
        if with_tools and 0.08 <= x < 0.12:
            x = 0.5  # the 'no tools here' answer would be wrong with tools declared
        if x < 0.08:
            q = r.choice(["Tell me a fortune.", "Give me a quote.", "Say something wise.", "Give me a fortune cookie.",
                          "Tell me something wise."])
            return q, r.choice(["", "Here is one: ", "Sure: "]) + r.choice(self.short_fortunes)
        if x < 0.12:
            city = r.choice(CITIES)[0]
            q = r.choice(["What's the weather in {c}?", "What time is it in {c}?", "Is it cold in {c} today?"]).format(c=city)
            return q, ("I can't look that up: I have no tools for live weather or clocks in this conversation. "
                       "If the request declares a weather or time tool, I can call it for you.")
        makers = [(0.16, lambda: facts.joke(r)), (0.24, lambda: facts.country(r, CAPITALS, self.city_countries)),
                  (0.36, lambda: facts.word(r, self.unknown_words)), (0.41, lambda: facts.colour(r)),
                  (0.48, lambda: facts.animal(r)), (0.54, lambda: facts.arithmetic(r)),
                  (0.59, lambda: facts.calendar(r)), (0.63, lambda: facts.opposite(r)),
                  (0.72, lambda: facts.fact(r)), (0.86, lambda: facts.talk(r)), (1.01, lambda: facts.unknown(r))]
        return next(make for bound, make in makers if x < bound)()

    # ----- whole conversations
    def tools_for(self, key):
        r = self.r
        keys = [key] if key else []
        others = [k for k in TOOL_MAKERS if k != key]
        keys += r.sample(others, r.randint(0 if key else 1, len(others)))
        r.shuffle(keys)
        made = {k: TOOL_MAKERS[k](r) for k in keys}
        return [made[k][0] for k in keys], made

    def sample(self):
        r = self.r
        msgs = []
        system = r.choice(SYSTEMS)
        if system:
            msgs.append({"role": "system", "content": system})
        x = r.random()
        if x < 0.5:
            key = r.choice(["weather", "weather", "weather", "time", "time", "convert", "convert", "timer"])
            tools, made = self.tools_for(key)
            if r.random() < 0.15:
                q0, a0 = self.prose_task(with_tools=True)
                msgs += [{"role": "user", "content": q0}, {"role": "assistant", "content": a0}]
            _, name, arg = made[key]
            task = getattr(self, key + "_task")
            q, _, args, result, ans = task(arg)
            calls = [(name, args, result, ans)]
            if key == "weather" and r.random() < 0.1:  # two cities, two calls
                q2, _, args2, result2, ans2 = task(arg)
                q = q.rstrip("?.") + " and in " + args2[arg] + "?"
                calls.append((name, args2, result2, ans2))
            msgs.append({"role": "user", "content": q})
            msgs.append({"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": n, "arguments": a}} for n, a, _, _ in calls]})
            if r.random() < 0.55:
                for _, _, res, _ in calls:
                    msgs.append({"role": "tool", "content": json.dumps(res)})
                msgs.append({"role": "assistant", "content": " ".join(a for _, _, _, a in calls)})
            return {"messages": msgs, "tools": tools}
        tools = None
        if x < 0.62:
            tools, _ = self.tools_for(None)
        for _ in range(1 if r.random() < 0.85 else 2):
            q, a = self.prose_task(with_tools=tools is not None)
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        return {"messages": msgs, "tools": tools}
