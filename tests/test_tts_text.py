"""speakable() and split_sentences(): written text -> what the voice should say."""
import pytest

from voice_agent.stages.speech_text import quick_start, speakable, split_sentences

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("text, spoken", [
    # currency
    ("The fee is $25.50.", "The fee is 25 dollars and 50 cents."),
    ("It costs $25/month.", "It costs 25 dollars per month."),
    ("Only $1 today.", "Only 1 dollar today."),
    ("Just $0.99.", "Just 99 cents."),
    ("A $1,200 phone.", "A 1200 dollars phone."),
    ("Pay $10.05 now.", "Pay 10 dollars and 5 cents now."),
    ("A £5 fee or €3.50.", "A 5 pounds fee or 3 euros and 50 cents."),
    ("Up to $1.5 million.", "Up to 1.5 million dollars."),
    # percentages and ranges
    ("A 15% discount.", "A 15 percent discount."),
    ("Save 10–20% now.", "Save 10 to 20 percent now."),
    ("Refunds take 5-10 business days.", "Refunds take 5 to 10 business days."),
    ("Between $10-$20.", "Between 10 dollars to 20 dollars."),
    ("The years 2020-2025.", "The years 2020 to 2025."),
    # dates
    ("From 2026-02-01.", "From February 1st, 2026."),
    ("Policy version 2026-02 applies.", "Policy version February 2026 applies."),
    ("Due 12/31/2026.", "Due December 31st, 2026."),
    ("Ships Feb 3.", "Ships February 3rd."),
    ("On 22 March.", "On March 22nd."),
    ("On March 11 we open.", "On March 11th we open."),
    ("Invalid 2026-13-45 stays.", "Invalid 2026-13-45 stays."),
    # times
    ("Open 9am-5pm Mon-Fri.", "Open 9 AM to 5 PM Monday to Friday."),
    ("At 14:30 today.", "At 2 30 PM today."),
    ("At 9:05 am.", "At 9 oh 5 AM."),
    ("From 08:00.", "From 8 AM."),
    ("Until 00:00.", "Until midnight."),
    ("Until 12:00.", "Until noon."),
    ("At 9:00.", "At 9 o'clock."),
    # phone numbers and codes
    ("Dial *#100# for your balance.", "Dial star hash 1 0 0 hash for your balance."),
    ("Use #31# to hide it.", "Use hash 3 1 hash to hide it."),
    ("Call *611.", "Call star 6 1 1."),
    ("Call 1-800-555-0199.", "Call 1, 8 0 0, 5 5 5, 0 1 9 9."),
    ("Or (555) 123-4567.", "Or 5 5 5, 1 2 3, 4 5 6 7."),
    ("Or +44 20 7946 0958.", "Or plus 4 4, 2 0, 7 9 4 6, 0 9 5 8."),
    ("Call 611 now.", "Call 6 1 1 now."),
    ("Your PIN is 0000.", "Your PIN is 0 0 0 0."),
    ("The PUK is 12345678.", "The PUK is 1 2 3 4 5 6 7 8."),
    ("Order ORD-12345 shipped.", "Order O-R-D 1 2 3 4 5 shipped."),
    ("Ticket #4521 is open.", "Ticket number 4 5 2 1 is open."),
    # amounts after code words stay amounts
    ("Your account 100 dollars.", "Your account 100 dollars."),
    ("Send 1000 texts.", "Send 1000 texts."),
    # units and abbreviations
    ("You get 10GB at 100 Mbps.", "You get 10 gigabytes at 100 megabits per second."),
    ("Only 1 GB left, 2.5 GB used.", "Only 1 gigabyte left, 2.5 gigabytes used."),
    ("Costs 2 dollars per GB.", "Costs 2 dollars per gigabyte."),
    ("Set the APN on your eSIM.", "Set the A-P-N on your e-sim."),
    ("Two SIMs and eSIMs.", "Two sims and e-sims."),
    ("Your SIM card.", "Your sim card."),
    ("Use wifi or WiFi.", "Use Wi-Fi or Wi-Fi."),
    ("Wait 3 hrs or 30 mins.", "Wait 3 hours or 30 minutes."),
    ("See the FAQ & T&Cs.", "See the F-A-Q and terms and conditions."),
    ("Support 24/7.", "Support 24 7."),
    ("Works on 5GHz.", "Works on 5 gigahertz."),
    ("Bring ID, e.g. a passport.", "Bring ID, for example a passport."),
    # markdown and web addresses
    ("See **Refunds** in the [policy](https://x.com/a).", "See Refunds in the policy."),
    ("- First item\n- Second item", "First item. Second item."),
    ("Email help@example.com.", "Email help at example dot com."),
    ("Visit www.example.com/help.", "Visit example dot com slash help."),
    ("A fee (one time) applies.", "A fee, one time, applies."),
    # left alone
    ("Version 3.2.1 of the app.", "Version 3.2.1 of the app."),
    ("A 24-month contract.", "A 24-month contract."),
    ("Hello there.", "Hello there."),
    ("", ""),
])
def test_speakable(text, spoken):
    assert speakable(text) == spoken


def test_speakable_is_idempotent_on_its_output():
    once = speakable("Refunds of $25.50 take 5-10 days from 2026-02-01; dial *#100#.")
    assert speakable(once) == once


def test_split_sentences_keeps_abbreviations_and_decimals():
    text = "Hello there. It takes 2.5 days, e.g. for Dr. Smith. Is that ok? Yes!"
    assert split_sentences(text) == [
        "Hello there.", "It takes 2.5 days, e.g. for Dr. Smith.", "Is that ok?", "Yes!"]


def test_split_sentences_paragraphs_bullets_and_empty():
    assert split_sentences("First part\n\nSecond part.\n- one\n- two") == [
        "First part", "Second part.", "one", "two"]
    assert split_sentences("   ") == []
    assert split_sentences("...") == []
    assert split_sentences("No end") == ["No end"]


def test_split_sentences_cuts_very_long_sentences():
    long = "; ".join(f"clause number {i} has several words in it" for i in range(12)) + "."
    parts = split_sentences(long)
    assert len(parts) > 1 and all(len(p) <= 220 for p in parts)
    assert " ".join(parts).count("clause number") == 12


def testquick_start_cuts_long_first_sentence_at_comma():
    assert quick_start(["Sure thing, your refund takes five to ten days.", "Bye."]) == [
        "Sure thing,", "your refund takes five to ten days.", "Bye."]
    assert quick_start(["Yes, it does."]) == ["Yes, it does."]  # short: left alone
    assert quick_start([]) == []
